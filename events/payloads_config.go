package events

// ---- config: the server configuration in force ----

// KindConfigLoaded is the kind of [ConfigLoaded].
const KindConfigLoaded Kind = "config.loaded"

// ConfigLoaded records a server configuration (mcp.json) put in force: at a
// host's start and at every reload that loaded. Its digest is keyed like
// lease fingerprints (HMAC-SHA256 under the manager's key), so it tells
// configurations apart within a run without exposing what they hold — the
// file carries secrets. A reload that failed to load records nothing: the
// previous configuration stays in force.
type ConfigLoaded struct {
	Trigger ConfigTrigger `json:"trigger"` // start, reload
	Digest  string        `json:"digest"`  // keyed digest of the file's bytes, 64 lowercase hex
	Servers int           `json:"servers"` // servers the configuration names
	Added   int           `json:"added"`   // servers new since the previous configuration (reload only)
	Removed int           `json:"removed"` // servers gone since it, whose leases ended (reload only)
}

// Kind implements [Payload].
func (*ConfigLoaded) Kind() Kind { return KindConfigLoaded }

// Validate implements [Payload].
func (p *ConfigLoaded) Validate() error {
	return checks{member("trigger", p.Trigger), digest("digest", p.Digest),
		between("servers", int64(p.Servers), 0, MaxConfigServers),
		between("added", int64(p.Added), 0, MaxConfigServers),
		between("removed", int64(p.Removed), 0, MaxConfigServers)}.first()
}

// MaxConfigServers bounds the server counts of config.loaded.
const MaxConfigServers = 1 << 16

// ConfigTrigger is what put a configuration in force.
type ConfigTrigger string

// ConfigTrigger values.
const (
	// ConfigStart: loaded when the host started.
	ConfigStart ConfigTrigger = "start"
	// ConfigReload: loaded again while running (SIGHUP, the control API).
	ConfigReload ConfigTrigger = "reload"
)

// Valid reports whether v is one of the ConfigTrigger values.
func (v ConfigTrigger) Valid() bool {
	switch v {
	case ConfigStart, ConfigReload:
		return true
	}
	return false
}

// values lists the ConfigTrigger values in catalogue order.
func (ConfigTrigger) values() []ConfigTrigger { return []ConfigTrigger{ConfigStart, ConfigReload} }
