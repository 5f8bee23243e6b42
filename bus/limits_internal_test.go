package bus

import (
	"fmt"
	"testing"
	"time"
)

// With the bucket table full of busy connections, new connection tokens
// share their class's overflow bucket, which runs dry: they do not each
// start with a full burst.
func TestRateTableFullChargesOverflow(t *testing.T) {
	r := &rateLimiter{lim: Limits{}.withDefaults(DefaultReplayChunkBytes), conns: map[string]*connBucket{}}
	now := time.Now()
	for i := range MaxRateTrackedConnections {
		if !r.allow(fmt.Sprintf("_INBOX_ro.c%d.1", i), classReadOnly, now) {
			t.Fatal("a fresh connection was limited")
		}
	}
	allowed := 0
	for i := range 1000 {
		if r.allow(fmt.Sprintf("_INBOX_ro.new%d.1", i), classReadOnly, now) {
			allowed++
		}
	}
	if allowed > int(r.lim.RequestBurst) {
		t.Fatalf("%d of 1000 requests on new tokens allowed with the table full, want at most the burst %v", allowed, r.lim.RequestBurst)
	}
	if len(r.conns) > MaxRateTrackedConnections {
		t.Fatalf("the table grew to %d", len(r.conns))
	}
}

// Idle buckets are forgotten when they have refilled at their own class's
// rate, not the writer's: a read-only bucket idle for burst/rate seconds.
func TestRateTableForgetsIdleByClass(t *testing.T) {
	r := &rateLimiter{lim: Limits{}.withDefaults(DefaultReplayChunkBytes), conns: map[string]*connBucket{}}
	now := time.Now()
	for i := range MaxRateTrackedConnections {
		r.allow(fmt.Sprintf("_INBOX_ro.c%d.1", i), classReadOnly, now)
	}
	later := now.Add(time.Duration(r.lim.RequestBurst/r.lim.RequestRate*float64(time.Second)) + time.Second)
	r.allow("_INBOX_ro.fresh.1", classReadOnly, later)
	if r.conns["_INBOX_ro.fresh"] == nil {
		t.Fatalf("a new connection was not tracked although every bucket had refilled (%d tracked)", len(r.conns))
	}
}
