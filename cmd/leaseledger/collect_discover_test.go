package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/ledger"
)

// Two collectors side by side over the same fleet, each with its own
// directory and fleet bus — one with --hosts auto, one with a static list —
// and a host started after both: the discovering collector mirrors it
// without a restart and serves it on its fleet bus (replay --host-id h3
// is h3's chain), and once both are stopped their directories' --fleet
// export are identical, every host's chain byte for byte.
func TestCollectDiscoversHostRedundantCollectorsAgree(t *testing.T) {
	ls, _, routes := startClusterHosts(t, "h1", "h2")
	dirA, dirB := t.TempDir(), t.TempDir()
	a := startCollect(t, dirA, routes, "--hosts", "auto")
	b := startCollect(t, dirB, routes, "--hosts", "h1,h2,h3")
	for _, c := range []*inProcessCollect{a, b} {
		for _, id := range []string{"h1", "h2"} {
			want := ls[id].Head().Seq
			c.waitHost(t, id, id+" mirrored", func(s collector.HostStatus) bool { return s.Head == want })
		}
	}

	l3, b3, _ := collectHost(t, "h3", routes[0]) // a fourth member of the cluster: the collectors were not restarted
	t.Cleanup(func() { l3.Close() })
	t.Cleanup(func() { b3.Close() })
	ls["h3"] = l3
	want := l3.Head().Seq
	for _, c := range []*inProcessCollect{a, b} {
		c.waitHost(t, "h3", "h3 mirrored", func(s collector.HostStatus) bool { return s.Head == want })
	}
	ctx := context.Background()
	if r := runCLI(t, ctx, "", "replay", "--nats", a.url, "--host-id", "h3"); r.code != 0 || r.stdout != rawLines(t, l3) {
		t.Fatalf("replay of the discovered h3 through the fleet bus differs from its chain: %+v", r)
	}

	for _, c := range []*inProcessCollect{a, b} {
		if code := c.stop(); code != 0 {
			t.Fatalf("collect exit %d:\n%s", code, c.out.String())
		}
	}
	ea := runCLI(t, ctx, "", "--fleet", "--data-dir", dirA, "export")
	eb := runCLI(t, ctx, "", "--fleet", "--data-dir", dirB, "export")
	if ea.code != 0 || eb.code != 0 || ea.stdout != eb.stdout {
		t.Fatalf("the two collectors' mirrors differ:\n%+v\n%+v", ea, eb)
	}
	got := linesByHost(ea.stdout)
	for id, l := range ls {
		var w string
		for seq := ledger.Seq(1); seq <= l.Head().Seq; seq++ {
			raw, err := l.GetRaw(seq)
			if err != nil {
				t.Fatal(err)
			}
			w += fmt.Sprintf(`{"host":%q,"event":%s}`+"\n", id, raw)
		}
		if got[id] != w {
			t.Errorf("host %s: the mirrors' export is not its chain", id)
		}
	}
}
