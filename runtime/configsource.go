package runtime

import "sort"

// Replace installs exactly the entries of all, atomically: a lookup sees
// either the entries before or all of these, never a mix. It refuses
// (ErrConfigInvalid, nothing changed) what ParseConfig and Set refuse: an
// entry that cannot start, a name that is empty, not UTF-8 or longer than
// MaxServerNameBytes, and two names that map to one server id. A host that
// reloads a configuration file puts what it parsed in force with it, so
// the configuration in force is exactly the one it loaded (and recorded:
// Manager.RecordConfig), and a file that fails to load changes nothing.
func (s *MapConfigSource) Replace(all map[string]ServerConfig) error {
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	sort.Strings(names) // the error names the same entry every time
	ids := make(map[string]string, len(all))
	m := make(map[string]ServerConfig, len(all))
	for _, name := range names {
		c := all[name]
		if err := checkName(ids, name); err != nil {
			return &LeaseError{Op: "config", Server: configErrID(name), Err: ErrConfigInvalid, cause: err}
		}
		if err := c.check(); err != nil {
			return &LeaseError{Op: "config", Server: configErrID(name), Err: ErrConfigInvalid, cause: err}
		}
		m[name] = c.clone()
	}
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
	return nil
}
