//go:build linux

package runtime

import (
	"context"
	"errors"
	"testing"
)

// RevokeLease (the control API's revocation) accepts a config name or a
// server id, says how many leases it revoked, and fails with ErrNoLease
// when nothing matched: an unknown session or server, or a session's
// revoke of a shared server (whose lease is at the shared key).
func TestRevokeLeaseFindsOrSaysNotFound(t *testing.T) {
	p := newPolicyEnv(t, nil)
	p.cfg.Set("my.server", ServerConfig{Command: "fake"})
	p.cfg.Set("shared", ServerConfig{Command: "fake", Shared: true})
	ctx := context.Background()
	s1 := p.open("s1")
	p.digest(s1, "my.server", "echo")
	p.digest(s1, "shared", "echo")
	id, err := ServerID("my.server")
	if err != nil || id == "my.server" {
		t.Fatalf("ServerID: %q %v", id, err)
	}
	for _, c := range []struct {
		name, session, server string
		shared, deny          bool
	}{
		{"unknown session", "nobody", "my.server", false, false},
		{"unknown server", "s1", "nothing", false, false},
		{"session on a shared server", "s1", "shared", false, false},
		{"deny of an unknown server", "s1", "nothing", false, true},
		{"shared of a server without one", "", "my.server", true, false},
	} {
		if n, err := p.m.RevokeLease(ctx, c.session, c.shared, c.server, "host_revoked", c.deny); !errors.Is(err, ErrNoLease) || n != 0 {
			t.Fatalf("%s: %d %v, want ErrNoLease", c.name, n, err)
		}
	}
	l := p.m.leaseOf("s1", id)
	if n, err := p.m.RevokeLease(ctx, "s1", false, id, "host_revoked", false); err != nil || n != 1 || !terminated(l) {
		t.Fatalf("revoke by server id: %d %v (terminated %v)", n, err, terminated(l))
	}
	if n, err := p.m.RevokeLease(ctx, "s1", false, "my.server", "host_revoked", false); !errors.Is(err, ErrNoLease) || n != 0 {
		t.Fatalf("revoke again: %d %v, want ErrNoLease", n, err)
	}
	// A denial of a configured server without a lease revokes nothing
	// and succeeds; Allow lifts it.
	if n, err := p.m.RevokeLease(ctx, "s1", false, "my.server", "host_denied", true); err != nil || n != 0 {
		t.Fatalf("deny without a lease: %d %v", n, err)
	}
	if _, err := s1.Capability().Tools(ctx, "my.server"); !errors.Is(err, ErrDenied) {
		t.Fatalf("after deny: %v, want ErrDenied", err)
	}
	if err := p.m.Allow("s1", "my.server"); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Capability().Tools(ctx, "my.server"); err != nil {
		t.Fatalf("after allow: %v", err)
	}
	sh := p.m.leaseOf(SharedSessionKey, "shared")
	if n, err := p.m.RevokeLease(ctx, "", true, "shared", "host_revoked", false); err != nil || n != 1 || !terminated(sh) {
		t.Fatalf("shared: %d %v", n, err)
	}
}

// Deny refuses a session that is not open (ErrSessionEnded) and records
// nothing in the denied set, which so stays bounded by open sessions.
func TestDenyNeedsAnOpenSession(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	if err := p.m.Deny(ctx, "never-opened", "fs", "host_denied"); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("deny of a session never opened: %v", err)
	}
	s := p.open("s1")
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.m.Deny(ctx, "s1", "fs", "host_denied"); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("deny of an ended session: %v", err)
	}
	p.m.denyMu.Lock()
	n := len(p.m.denied)
	p.m.denyMu.Unlock()
	if n != 0 {
		t.Fatalf("%d denials kept for sessions not open", n)
	}
}
