package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/gateway"
	"github.com/leaseledger/leaseledger/policy"
	"github.com/leaseledger/leaseledger/runtime"
)

// reloadTimeout bounds one reload: reading the file, and ending the
// leases of the servers it removed (each close bounded on its own too).
const reloadTimeout = 2 * time.Minute

// loadedConfig is one load of --config: its entries, their names sorted
// (the servers the gateway offers) and the file's bytes (recorded by
// their keyed digest).
type loadedConfig struct {
	entries map[string]runtime.ServerConfig
	names   []string
	// prefixes are the entries' "prefix" settings (entries without one
	// are absent: the gateway's default).
	prefixes map[string]string
	data     []byte
}

// loadConfig reads and parses the mcp.json at path: what serve puts in
// force at start and at each reload (the manager looks entries up in
// what was loaded, so the configuration in force is exactly the one
// recorded, and a file that fails to load changes nothing).
func loadConfig(path string) (loadedConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return loadedConfig{}, fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, runtime.MaxConfigBytes+1))
	if err != nil {
		return loadedConfig{}, fmt.Errorf("--config: %w", err)
	}
	if len(data) > runtime.MaxConfigBytes {
		return loadedConfig{}, fmt.Errorf("--config: %s is larger than %d bytes", path, runtime.MaxConfigBytes)
	}
	all, err := runtime.ParseConfig(data)
	if err != nil {
		return loadedConfig{}, fmt.Errorf("--config: %w", err)
	}
	if len(all) > gateway.MaxServers {
		return loadedConfig{}, fmt.Errorf("--config: %d servers, more than the gateway offers (%d)", len(all), gateway.MaxServers)
	}
	names := make([]string, 0, len(all))
	for name := range all {
		if !gateway.ValidServerName(name) {
			return loadedConfig{}, fmt.Errorf("--config: server name %q cannot be exposed: tools are named <server>__<tool>, so a name is 1 to %d bytes of [A-Za-z0-9_.-], without \"__\" and not ending in '_' (docs/gateway.md)", name, gateway.MaxServerNameLen)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	prefixes := map[string]string{}
	for name, c := range all {
		if c.Prefix != nil {
			prefixes[name] = *c.Prefix
		}
	}
	return loadedConfig{entries: all, names: names, prefixes: prefixes, data: data}, nil
}

// reloadChange is what a reload put in force.
type reloadChange struct {
	servers        []string
	added, removed []string
	ended          int // leases of removed servers ended
	// policy is the access policy set put in force (nil without --policy).
	policy *policy.Set
}

// policyLoaded is the policy.loaded of set put in force by trigger: mode
// enforced with its digest, or allow_all without a set.
func policyLoaded(trigger events.ConfigTrigger, set *policy.Set) *events.PolicyLoaded {
	if set == nil {
		return &events.PolicyLoaded{Trigger: trigger, Mode: events.PolicyAllowAll}
	}
	return &events.PolicyLoaded{Trigger: trigger, Mode: events.PolicyEnforced, Digest: set.Digest(), Policies: set.Len()}
}

func (c reloadChange) String() string {
	s := fmt.Sprintf("config reloaded: %d server(s), added %v, removed %v (%d lease(s) ended)", len(c.servers), c.added, c.removed, c.ended)
	if c.policy != nil {
		s += fmt.Sprintf("; policy reloaded: %d policies, digest %s", c.policy.Len(), c.policy.Digest())
	}
	return s
}

// offered returns the server names the gateway offers now.
func (rt *serveRuntime) offered() []string {
	rt.reloadMu.Lock()
	defer rt.reloadMu.Unlock()
	return slices.Clone(rt.servers)
}

// reload reads --config again and puts it in force: the manager looks
// its entries up from now on, the gateway offers its servers (new ones in
// each session's next listing), the leases of servers it no longer names
// end through their normal close (lease.terminated{removed}), entries
// that changed replace their leases at their next use (the fingerprint
// rule), and config.loaded records it. A file that fails
// to load changes nothing: the error says why and the previous
// configuration stays in force. Reloads run one at a time.
func (rt *serveRuntime) reload(ctx context.Context) (reloadChange, error) {
	rt.reloadMu.Lock()
	defer rt.reloadMu.Unlock()
	cfg, err := loadConfig(rt.cfgPath)
	if err != nil {
		return reloadChange{}, fmt.Errorf("config not reloaded (the previous one stays in force): %w", err)
	}
	// The policy files are read and validated before anything changes: a
	// reload puts both files in force or neither (a policy that does not
	// validate keeps the previous configuration and policy deciding).
	var set *policy.Set
	if rt.flags.policy != "" {
		if set, err = policy.Load(rt.flags.policy, rt.flags.policyEntities); err != nil {
			return reloadChange{}, fmt.Errorf("%s; nor the policy: --policy: %w", configNotReloaded, err)
		}
	}
	names, data := cfg.names, cfg.data
	logConfigWarnings(rt.a.logger, data)
	change := reloadChange{servers: names, policy: set}
	for _, n := range names {
		if !slices.Contains(rt.servers, n) {
			change.added = append(change.added, n)
		}
	}
	for _, n := range rt.servers {
		if !slices.Contains(names, n) {
			change.removed = append(change.removed, n)
		}
	}
	if err := rt.cfgSrc.Replace(cfg.entries); err != nil {
		return reloadChange{}, fmt.Errorf("config not reloaded (the previous one stays in force): %w", err)
	}
	if err := rt.gw.SetServers(names, cfg.prefixes); err != nil {
		// Not reached: loadConfig accepts only names the gateway offers.
		return reloadChange{}, fmt.Errorf("config reloaded, but the gateway kept its servers: %w", err)
	}
	rt.servers = names
	var errs []error
	if set != nil {
		rt.policy.Swap(set)
		rt.gw.PolicyChanged()
		if err := rt.mgr.RecordPolicy(ctx, policyLoaded(events.ConfigReload, set)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range change.removed {
		k, err := rt.mgr.TerminateServer(ctx, n)
		change.ended += k
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := rt.mgr.RecordConfig(ctx, events.ConfigReload, data,
		runtime.ConfigChange{Servers: len(names), Added: len(change.added), Removed: len(change.removed)}); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return change, fmt.Errorf("config reloaded, but not all of it recorded: %v", errs)
	}
	return change, nil
}
