package startupbench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// ServeReadyPrefix starts the line serve prints once its NATS server
// accepts connections, followed by its client URL.
const ServeReadyPrefix = "leaseledger: NATS listening on "

// serveStatsFormat is serve's line saying how it rebuilt its projection.
const serveStatsFormat = "leaseledger: projection from snapshot at seq %d plus %d replayed event(s)"

// sample is one start of a child process.
type sample struct {
	// Ready is the time from just before the process was started to the
	// first accepted TCP connection to the URL it printed.
	Ready time.Duration
	// PeakRSS is the child's peak resident set in bytes over its whole
	// life (0: not known on this system).
	PeakRSS int64
	// SnapshotSeq and Replayed are what serve said about its projection
	// (zero for the floor).
	SnapshotSeq, Replayed uint64
}

// stderrKeep bounds the child's stderr kept for an error message.
const stderrKeep = 8 << 10

// boundedBuffer keeps the first stderrKeep bytes written to it.
type boundedBuffer struct{ bytes.Buffer }

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := stderrKeep - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// launch starts exe with args, waits for the line starting with prefix
// (whose rest is a URL), dials that URL's host once, then stops the child
// with SIGTERM and reaps it. The child is killed when ctx ends or after
// timeout; it is always reaped before launch returns.
func launch(ctx context.Context, exe string, args []string, prefix string, timeout time.Duration) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	var stderr boundedBuffer
	cmd.Stderr = &stderr
	// Bounds the wait for the stdout pipe after the child exits (a
	// descendant holding it would otherwise block Wait).
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return sample{}, fmt.Errorf("startupbench: %s: %w", args, err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return sample{}, fmt.Errorf("startupbench: start %s %s: %w", exe, strings.Join(args, " "), err)
	}
	var (
		s       sample
		readErr error
		ready   bool
	)
	sc := bufio.NewScanner(out)
	for !ready && sc.Scan() {
		line := sc.Text()
		_, _ = fmt.Sscanf(line, serveStatsFormat, &s.SnapshotSeq, &s.Replayed)
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		ready = true
		readErr = dialOnce(ctx, rest)
		s.Ready = time.Since(start)
	}
	if !ready && readErr == nil {
		readErr = errors.Join(errors.New("exited before it listened"), sc.Err())
	}
	// Stop it as a supervisor would, then read its output to the end so
	// that it never blocks on a full pipe while shutting down.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	for sc.Scan() {
	}
	waitErr := cmd.Wait()
	if readErr == nil && waitErr != nil {
		readErr = fmt.Errorf("stopping: %w", waitErr)
	}
	if readErr != nil {
		return sample{}, fmt.Errorf("startupbench: %s %s: %w\n%s", exe, strings.Join(args, " "), readErr, strings.TrimSpace(stderr.String()))
	}
	s.PeakRSS = peakRSS(cmd.ProcessState)
	return s, nil
}

// dialOnce connects to the host of rawURL (nats://host:port) and closes
// the connection: the moment a client can connect.
func dialOnce(ctx context.Context, rawURL string) error {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil {
		return fmt.Errorf("the listening line's URL %q: %w", rawURL, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", u.Host, err)
	}
	return c.Close()
}
