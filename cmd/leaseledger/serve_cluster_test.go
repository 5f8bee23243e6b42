package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// Serve's fleet flags are checked before anything is opened, with errors
// that name the flags.
func TestServeClusterFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-listen", "127.0.0.1:-1"}, "need --host-id"},
		{[]string{"--leaf-remote", "nats-leaf://127.0.0.1:7422"}, "need --host-id"},
		{[]string{"--host-id", "h.1"}, "--host-id"},
		{[]string{"--host-id", "h1", "--routes", "nats-route://127.0.0.1:6222"}, "--routes needs --cluster-listen"},
		{[]string{"--host-id", "h1", "--cluster-listen", "127.0.0.1:-1", "--cluster-user", "u"}, "--cluster-password"},
		{[]string{"--host-id", "h1", "--tls-cert", "c.pem"}, "--tls-key"},
		{[]string{"--host-id", "h1", "--cluster-user", "u", "--cluster-password", "p"}, "need --cluster-listen"},
		{[]string{"--host-id", "h1", "--cluster-listen", "127.0.0.1"}, "cluster listen address"},
	} {
		args := append([]string{"--data-dir", t.TempDir(), "serve", "--port", "-1"}, c.args...)
		r := runCLI(t, context.Background(), "", args...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want an error naming %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// startServeHost runs serve with args and returns its NATS URL, the
// cluster URL it printed, and a stop function returning its exit code.
func startServeHost(t *testing.T, args ...string) (url, clusterURL string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	served := make(chan int, 1)
	go func() {
		var errb bytes.Buffer
		served <- run(ctx, args, strings.NewReader(""), pw, &errb)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "leaseledger: NATS listening on "); ok {
			url = u
		}
		if u, ok := strings.CutPrefix(sc.Text(), "leaseledger: NATS cluster listening on "); ok {
			clusterURL = u
			break
		}
	}
	go io.Copy(io.Discard, pr)
	stop = func() int {
		cancel()
		select {
		case code := <-served:
			return code
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not stop")
			return -1
		}
	}
	if url == "" || clusterURL == "" {
		stop()
		t.Fatalf("serve printed no URLs (%q, %q)", url, clusterURL)
	}
	return url, clusterURL, stop
}

// serve --host-id binds the ledger to the host (host.bound, the genesis),
// serves the host's space, and refuses the same directory as another host;
// client commands reach it with --host-id.
func TestServeHostID(t *testing.T) {
	dir := t.TempDir()
	in, _ := examples(t)
	// The examples may bind a host of their own: not this test's.
	var keep []string
	for _, line := range strings.Split(strings.TrimSpace(in), "\n") {
		if !strings.Contains(line, `"host.bound"`) {
			keep = append(keep, line)
		}
	}
	in, n := strings.Join(keep, "\n")+"\n", len(keep)
	url, clusterURL, stop := startServeHost(t, "--data-dir", dir, "serve", "--port", "-1", "--host-id", "h1",
		"--cluster-listen", "127.0.0.1:-1", "--writer-user", "w", "--writer-password", "pw")
	if !strings.HasPrefix(clusterURL, "nats-route://127.0.0.1:") {
		t.Errorf("cluster URL %q", clusterURL)
	}
	if r := runCLI(t, context.Background(), "", "head", "--nats", url, "--host-id", "h1"); r.code != 0 || !strings.HasPrefix(r.stdout, "1 ") {
		t.Errorf("head of h1: %+v", r)
	}
	if r := runCLI(t, context.Background(), in, "append", "--nats", url, "--host-id", "h1", "--user", "w", "--password", "pw"); r.code != 0 || strings.Count(r.stdout, "\n") != n {
		t.Fatalf("append to h1: %+v", r)
	}
	r := runCLI(t, context.Background(), "", "replay", "--nats", url, "--host-id", "h1", "--from", "1", "--to", "1", "--kind", "")
	if r.code != 0 || !strings.Contains(r.stdout, `"host.bound"`) || !strings.Contains(r.stdout, `"h1"`) {
		t.Errorf("replay of seq 1: %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if r := runCLI(t, ctx, "", "head", "--nats", url); r.code == 0 {
		t.Errorf("head in the bare space of a host-qualified serve: %+v", r)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exit %d", code)
	}
	r = runCLI(t, context.Background(), "", "--data-dir", dir, "serve", "--port", "-1", "--host-id", "h2")
	if r.code == 0 || !strings.Contains(r.stderr, "h1") || !strings.Contains(r.stderr, "h2") {
		t.Errorf("serve as h2 on h1's ledger: %+v", r)
	}
	if r := runCLI(t, context.Background(), "", "--data-dir", dir, "verify", "--quiet"); r.code != 0 {
		t.Errorf("verify: %+v", r)
	}
}
