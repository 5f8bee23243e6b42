//go:build linux

package gateway

import (
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A listing page served by several servers' request handles in turn (the
// first two list nothing) relays every server's progress under the
// client's one token with strictly increasing values — each server counts
// 1..3 of 3, the client sees 1..9 — and no Total, the listing's overall
// total being unknown. Both list methods.
func TestListingProgressIncreasesAcrossServers(t *testing.T) {
	empty := map[string]string{"TESTSERVER_LIST_PROGRESS": "3", "TESTSERVER_LIST_EMPTY": "1"}
	full := map[string]string{"TESTSERVER_LIST_PROGRESS": "3"}
	e := newEnv(t, []server{{"a", testServer(empty)}, {"b", testServer(empty)}, {"c", testServer(full)}}, nil, nil)
	ctx := ctxT(t, time.Minute)
	prog := &progressLog{}
	cs := e.mustConnect(ctx, "", prog)
	defer cs.Close()

	check := func(method, token string, items int) {
		t.Helper()
		testproc.Eventually(t, method+" progress", func() bool { return prog.n.Load() >= 9 })
		time.Sleep(50 * time.Millisecond) // any extra notification arrives
		prog.mu.Lock()
		got := append([]*mcp.ProgressNotificationParams(nil), prog.got...)
		prog.mu.Unlock()
		if len(got) != 9 {
			t.Errorf("%s: %d progress notifications, want 9 (three per server)", method, len(got))
		}
		for i, p := range got {
			if p.ProgressToken != token || p.Progress != float64(i+1) || p.Total != 0 {
				t.Errorf("%s: progress %d: token %v progress %v total %v, want %s %d 0", method, i, p.ProgressToken, p.Progress, p.Total, token, i+1)
			}
			if i > 0 && !(p.Progress > got[i-1].Progress) {
				t.Errorf("%s: progress %d (%v) does not increase on %v", method, i, p.Progress, got[i-1].Progress)
			}
		}
		if items != 2 {
			t.Errorf("%s: %d items on the page, want server c's first page of 2", method, items)
		}
		prog.reset()
	}

	lp := &mcp.ListResourcesParams{}
	lp.SetProgressToken("r-1")
	lr, err := cs.ListResources(ctx, lp)
	if err != nil {
		t.Fatalf("resources/list: %v", err)
	}
	check("resources/list", "r-1", len(lr.Resources))

	tp := &mcp.ListResourceTemplatesParams{}
	tp.SetProgressToken("t-1")
	tr, err := cs.ListResourceTemplates(ctx, tp)
	if err != nil {
		t.Fatalf("resources/templates/list: %v", err)
	}
	check("resources/templates/list", "t-1", len(tr.ResourceTemplates))
}
