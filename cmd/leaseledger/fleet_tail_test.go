package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/collector"
)

// tail --fleet --from-seq 0 means what plain `tail --from-seq 0` means:
// catch up from the start (every stored event of every host), not "new
// events only" — only an absent --from-seq starts at each host's head.
func TestFleetTailFromSeqZero(t *testing.T) {
	ids := []string{"h1", "h2"}
	ls, _, routes := startClusterHosts(t, ids...)
	c := startCollect(t, t.TempDir(), routes, "--hosts", strings.Join(ids, ","))
	for _, id := range ids {
		want := ls[id].Head().Seq
		c.waitHost(t, id, id+" mirrored", func(s collector.HostStatus) bool { return s.Head == want })
	}
	want := map[string]string{}
	for _, id := range ids {
		for line := range strings.SplitAfterSeq(rawLines(t, ls[id]), "\n") {
			if line != "" {
				want[id] += fmt.Sprintf(`{"host":%q,"event":%s}`+"\n", id, strings.TrimSuffix(line, "\n"))
			}
		}
	}
	tctx, stopTail := context.WithCancel(context.Background())
	defer stopTail()
	tout := &lockedBuffer{}
	tailDone := make(chan int, 1)
	go func() {
		var errb strings.Builder
		tailDone <- run(tctx, []string{"--fleet", "tail", "--nats", c.url, "--from-seq", "0"}, strings.NewReader(""), tout, &errb)
	}()
	waitOutput(t, "tail --fleet --from-seq 0 from each host's first event", tout, func(s string) bool {
		got := linesByHost(s)
		return got["h1"] == want["h1"] && got["h2"] == want["h2"]
	})
	stopTail()
	if code := <-tailDone; code != 0 {
		t.Fatalf("tail --fleet exit %d", code)
	}
}
