package main

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestDashboardAccess loads the dashboard of a real serve in headless
// Chromium and appends the access policy's evidence through serve's
// writer: the Activations view shows the policy in force (mode and short
// digest, from the audit summary, asked again when a policy.loaded
// arrives), the denials per session among the events followed (a call
// refused by a forbid, a read no permit applied to), a recent activation's
// denied decisions, and its evidence's access section with the deciding
// policies; no console error.
func TestDashboardAccess(t *testing.T) {
	chromium := requireChromium(t)
	requireNode(t)
	bin := cliBinary(t)
	srv := startServe(t, bin, t.TempDir(), writeConfig(t, ""), "--ws-port", "-1", "--writer-user", "w", "--writer-password", "pw")
	defer srv.stop(syscall.SIGTERM)
	b := newBrowser(t, chromium)
	b.do(chromedp.Navigate(srv.dashboardURL()))
	b.await(`__dashboard.state === "live"`, e2eWait)
	b.view("activations", "access-before")

	const pd = "5d1e0f8a0c1b9e7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d"
	lines := []string{
		`{"kind":"policy.loaded","data":{"trigger":"reload","mode":"enforced","digest":"` + pd + `","policies":4}}`,
		`{"kind":"access.decided","activation":"act-pol","session":"s-pol","server":"github","data":{"action":"read_resource","target_sha256":"` + pd + `","allowed":false,"policy_digest":"` + pd + `"}}`,
		`{"kind":"call.refused","activation":"act-pol","session":"s-pol","server":"github","data":{"call_id":"c-1","tool":"delete","reason":"policy","policies":["no-delete"],"policy_digest":"` + pd + `"}}`,
		`{"kind":"access.decided","activation":"act-pol","session":"s-pol","server":"github","data":{"action":"get_prompt","allowed":true,"policies":["readers"],"policy_digest":"` + pd + `"}}`,
	}
	if r := runCLI(t, context.Background(), strings.Join(lines, "\n")+"\n", "append", "--nats", srv.natsURL, "--user", "w", "--password", "pw"); r.code != 0 {
		t.Fatalf("append: %+v", r)
	}

	b.await(`document.getElementById("policy").dataset.mode === "enforced" && document.getElementById("policy").textContent.includes("policy: enforced 5d1e0f8a0c1b (4 policies") &&
		document.getElementById("policy").textContent.includes("decisions: 1 allowed, 2 denied")`, e2eWait)
	denied := `document.querySelector('#denied-body tr[data-session="s-pol"][data-denied="2"]')`
	b.await(denied+` && `+denied+`.textContent.includes("call tool 1") && `+denied+`.textContent.includes("read resource 1") && `+denied+`.textContent.includes("delete: no-delete")`, e2eWait)
	row := `document.querySelector('#recent-body tr[data-activation="act-pol"][data-access-denied="2"]')`
	b.await(row+` && `+row+`.textContent.includes("access 1 allowed, 2 denied")`, e2eWait)
	b.clickNow(`#recent-body tr[data-activation="act-pol"]`)
	sec := `document.querySelector('#evidence section[data-section="access"]')`
	b.await(sec+` && `+sec+`.textContent.includes("1 allowed, 2 denied") && `+sec+`.textContent.includes("no-delete") && `+
		sec+`.textContent.includes("no permit applied") && `+sec+`.textContent.includes("readers")`, e2eWait)
	b.view("activations", "access")
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors: %v", errs)
	}
}
