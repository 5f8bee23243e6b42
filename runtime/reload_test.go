//go:build linux

package runtime

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
)

// TestRecordConfig: config.loaded carries the trigger and the counts; its
// digest is the same for the same bytes under one manager, differs for
// other bytes, differs under another manager (it is keyed), and never
// holds the configuration's text.
func TestRecordConfig(t *testing.T) {
	e1, e2 := newEnv(t, nil), newEnv(t, nil)
	ctx := context.Background()
	const secret = "s3cr3t-token-value"
	a := []byte(`{"mcpServers":{"x":{"command":"c","env":{"TOKEN":"` + secret + `"}}}}`)
	b := []byte(`{"mcpServers":{"x":{"command":"c"}}}`)
	if err := e1.m.RecordConfig(ctx, events.ConfigStart, a, ConfigChange{Servers: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e1.m.RecordConfig(ctx, events.ConfigReload, a, ConfigChange{Servers: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e1.m.RecordConfig(ctx, events.ConfigReload, b, ConfigChange{Servers: 1, Added: 1, Removed: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e2.m.RecordConfig(ctx, events.ConfigStart, a, ConfigChange{Servers: 1}); err != nil {
		t.Fatal(err)
	}
	loaded := func(e *env) []*events.ConfigLoaded {
		var out []*events.ConfigLoaded
		for _, x := range e.events() {
			if p, ok := x.Payload.(*events.ConfigLoaded); ok {
				out = append(out, p)
			}
		}
		return out
	}
	l1, l2 := loaded(e1), loaded(e2)
	if len(l1) != 3 || len(l2) != 1 {
		t.Fatalf("%d and %d config.loaded", len(l1), len(l2))
	}
	if l1[0].Trigger != events.ConfigStart || l1[1].Trigger != events.ConfigReload || l1[2].Added != 1 || l1[2].Removed != 1 {
		t.Fatalf("recorded %+v %+v %+v", *l1[0], *l1[1], *l1[2])
	}
	if l1[0].Digest != l1[1].Digest || l1[0].Digest == l1[2].Digest || l1[0].Digest == l2[0].Digest {
		t.Fatalf("digests %s %s %s (other manager %s)", l1[0].Digest, l1[1].Digest, l1[2].Digest, l2[0].Digest)
	}
	for _, env := range e1.envelopes() {
		b, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), secret) {
			t.Fatalf("seq %d holds the configuration's secret", env.Seq)
		}
	}
}
