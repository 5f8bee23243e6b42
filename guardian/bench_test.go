//go:build linux

package guardian

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"testing"
	"time"
)

// BenchmarkRelayVsDirect measures, in one run, the same echo target reached
// through the guardian and through a direct pipe: bulk throughput and the
// round-trip latency of one small newline-delimited message. It reports
// both sides and their ratios; the targets are throughput of at least half
// of direct and an added round-trip under 100 µs.
//
//	go test -run '^$' -bench RelayVsDirect -benchtime 3x ./guardian/
func BenchmarkRelayVsDirect(b *testing.B) {
	const (
		bulk   = 64 << 20 // bytes per throughput measurement
		chunk  = 64 << 10
		rounds = 2000 // round trips per latency measurement
	)
	msg := append(bytes.Repeat([]byte("x"), 127), '\n')

	var dDirect, dGuard, rDirect, rGuard time.Duration
	for b.Loop() {
		// Direct pipe.
		cmd := exec.Command(targetBin.Out, "echo")
		in, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		dDirect += throughput(b, in, out, bulk, chunk)
		rDirect += roundTrips(b, in, out, msg, rounds)
		_ = in.Close()
		_ = cmd.Wait()

		// Through the guardian.
		sp := Spec{Command: targetBin.Out, Args: []string{"echo"}, ActivationID: "bench", HelperPath: helperBin.Out}
		s, err := Launch(context.Background(), sp)
		if err != nil {
			b.Fatal(err)
		}
		dGuard += throughput(b, s, s, bulk, chunk)
		rGuard += roundTrips(b, s, s, msg, rounds)
		ctx, cancel := context.WithTimeout(context.Background(), sp.CleanupBudget())
		r := s.Close(ctx)
		cancel()
		if !r.Confirmed {
			b.Fatalf("cleanup unconfirmed: %s", r.Reason)
		}
	}
	n := float64(b.N)
	mbps := func(d time.Duration) float64 { return float64(bulk) * n / d.Seconds() / (1 << 20) }
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / n / rounds }
	b.ReportMetric(mbps(dDirect), "direct-MiB/s")
	b.ReportMetric(mbps(dGuard), "guardian-MiB/s")
	b.ReportMetric(mbps(dGuard)/mbps(dDirect), "throughput-ratio")
	b.ReportMetric(us(rDirect), "direct-rtt-µs")
	b.ReportMetric(us(rGuard), "guardian-rtt-µs")
	b.ReportMetric(us(rGuard)-us(rDirect), "added-rtt-µs")
	b.ReportMetric(us(rGuard)/us(rDirect), "rtt-ratio")
}

// throughput pushes total bytes through the echo target and reads them back.
func throughput(b *testing.B, w io.Writer, r io.Reader, total, chunk int) time.Duration {
	buf := make([]byte, chunk)
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		for sent := 0; sent < total; sent += chunk {
			if _, err := w.Write(buf); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	rbuf := make([]byte, chunk)
	for got := 0; got < total; {
		n, err := r.Read(rbuf)
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
	d := time.Since(start)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	return d
}

// roundTrips sends one line at a time and waits for its echo.
func roundTrips(b *testing.B, w io.Writer, r io.Reader, msg []byte, n int) time.Duration {
	back := make([]byte, len(msg))
	start := time.Now()
	for range n {
		if _, err := w.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, back); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}
