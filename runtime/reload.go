package runtime

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"

	"github.com/leaseledger/leaseledger/events"
)

// ConfigChange says how a configuration put in force differs from the
// one before it: the counts config.loaded records.
type ConfigChange struct {
	// Servers is how many servers the configuration names.
	Servers int
	// Added and Removed count the servers new since the previous
	// configuration and gone since it (both 0 at start).
	Added, Removed int
}

// RecordConfig records that the configuration whose file bytes are data
// was put in force (config.loaded): at a host's start (events.ConfigStart)
// or by a reload that loaded (events.ConfigReload). Its digest is keyed
// like fingerprints (HMAC-SHA256 under this manager's key), so it tells
// configurations apart within the manager's life without exposing the
// secrets a configuration holds. A host records nothing for a reload that
// failed to load.
func (m *Manager) RecordConfig(ctx context.Context, trigger events.ConfigTrigger, data []byte, change ConfigChange) error {
	mac := hmac.New(sha256.New, m.fpKey)
	mac.Write(data)
	p := &events.ConfigLoaded{Trigger: trigger, Digest: hex.EncodeToString(mac.Sum(nil)),
		Servers: change.Servers, Added: change.Added, Removed: change.Removed}
	if err := m.emitFact(ctx, events.Draft{Payload: p}); err != nil {
		return newErr("config", nil, ErrLedger, err)
	}
	return nil
}

// RecordPolicy records the access policy a host put in force
// (policy.loaded): at its start (events.ConfigStart: a policy set, or the
// allow_all default without one) and at every reload that loaded one. p's
// digest is the set's own (policy.Set.Digest), not keyed: policies hold
// no secrets, and an auditor recomputes it from the files. A host records
// nothing for a reload that failed to load: the previous policy stays in
// force.
func (m *Manager) RecordPolicy(ctx context.Context, p *events.PolicyLoaded) error {
	if err := m.emitFact(ctx, events.Draft{Payload: p}); err != nil {
		return newErr("policy", nil, ErrLedger, err)
	}
	return nil
}

// TerminateServer ends every lease of the server named name (a config
// name), its sessions' and its shared one, with reason events.TerminatedRemoved:
// the configuration no longer names it. Each goes through the normal close
// (guardian cleanup or HTTP close, recorded and audited); calls in flight on
// them fail. It returns how many leases it ended. Like TerminateAll, the
// cleanup runs detached from ctx's cancellation; ctx only bounds waiting for
// leases still starting. A lease acquired after it returns is not ended: the
// host removes the server from what it offers before calling it.
func (m *Manager) TerminateServer(ctx context.Context, name string) (int, error) {
	id, err := ServerID(name)
	if err != nil {
		return 0, newErr("terminate_server", nil, ErrInvalidRequest, nil)
	}
	m.mu.Lock()
	var ls []*lease
	for k, l := range m.leases {
		if k.server == id {
			delete(m.leases, k)
			m.detached[l] = struct{}{}
			ls = append(ls, l)
		}
	}
	m.mu.Unlock()
	return len(ls), terminateAll(ctx, ls, events.TerminatedRemoved)
}
