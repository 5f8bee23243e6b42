//go:build linux

package helper

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// idleWindow is how long BenchmarkIdleHelpers leaves its sessions idle.
const idleWindow = 5 * time.Second

// fullScanTag builds a helper that tracks descendants as before the
// children files (see scanmode_fullscan_linux.go): the idle baseline.
const fullScanTag = "guardianfullscan"

// BenchmarkIdleHelpers measures, in one run, the CPU that idle helpers use:
// n sessions (32, then 64), each a real helper guarding a sleeping target,
// first with helpers built to scan all of /proc on every tick (the
// baseline, as before the children files), then with the helpers as
// shipped. For each set it sums, over the idle window, the helpers' run
// time from /proc/<pid>/task/*/schedstat (ns, exact) and utime+stime from
// /proc/<pid>/stat (clock ticks, sampled), and reports both per second of
// window (all n helpers together), and the ratio shipped/baseline.
//
//	go test -run '^$' -bench IdleHelpers -benchtime 1x ./guardian/helper/
func BenchmarkIdleHelpers(b *testing.B) {
	base := filepath.Join(b.TempDir(), "guardian-fullscan")
	cmd := exec.Command(testproc.GoTool(), "build", "-tags", fullScanTag, "-o", base, helperBin.Pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the baseline helper: %v\n%s", err, out)
	}
	for _, n := range []int{32, 64} {
		b.Run(fmt.Sprintf("helpers=%d", n), func(b *testing.B) {
			var old, cur idleCPU
			for b.Loop() {
				old = old.add(measureIdle(b, base, n))
				cur = cur.add(measureIdle(b, helperBin.Out, n))
			}
			per := func(d time.Duration) float64 {
				return float64(d.Microseconds()) / 1e3 / (idleWindow.Seconds() * float64(b.N))
			}
			b.ReportMetric(per(old.run), "fullscan-cpu-ms/s")
			b.ReportMetric(per(cur.run), "children-cpu-ms/s")
			b.ReportMetric(float64(cur.run)/float64(old.run), "cpu-ratio")
			b.ReportMetric(per(old.ticks), "fullscan-stat-ms/s")
			b.ReportMetric(per(cur.ticks), "children-stat-ms/s")
		})
	}
}

// idleCPU is the CPU a set of helpers used in the idle window.
type idleCPU struct {
	run   time.Duration // schedstat: time on CPU
	ticks time.Duration // utime+stime, sampled at clock ticks
}

func (a idleCPU) add(b idleCPU) idleCPU { return idleCPU{a.run + b.run, a.ticks + b.ticks} }

func (a idleCPU) sub(b idleCPU) idleCPU { return idleCPU{a.run - b.run, a.ticks - b.ticks} }

// measureIdle starts n sessions of the helper at path, samples their CPU
// before and after idleWindow, and ends them.
func measureIdle(b *testing.B, path string, n int) idleCPU {
	sessions := make([]*rawSession, 0, n)
	defer func() {
		for _, s := range sessions {
			s.close(b)
		}
	}()
	for i := range n {
		sessions = append(sessions, startRaw(b, path, fmt.Sprintf("idle-%d", i), "sleep"))
	}
	sample := func() (c idleCPU) {
		for _, s := range sessions {
			c = c.add(helperCPU(b, s.cmd.Process.Pid))
		}
		return c
	}
	before := sample()
	time.Sleep(idleWindow)
	return sample().sub(before)
}

// helperCPU reads the CPU pid has used so far.
func helperCPU(b *testing.B, pid int) (c idleCPU) {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	f := bytes.Fields(st[bytes.LastIndexByte(st, ')')+1:])
	// Fields after the command: state is field 3, utime 14, stime 15.
	ut, _ := strconv.ParseInt(string(f[11]), 10, 64)
	stime, _ := strconv.ParseInt(string(f[12]), 10, 64)
	c.ticks = time.Duration(ut+stime) * time.Second / clockTicks
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	for _, t := range tasks {
		s, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		ns, _ := strconv.ParseInt(string(bytes.Fields(s)[0]), 10, 64)
		c.run += time.Duration(ns)
	}
	return c
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat
// (100 on every Linux architecture Go supports).
const clockTicks = 100

// rawSession is a helper driven over the frame protocol directly, without
// the host package.
type rawSession struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	fw  *wire.Writer
	fr  *wire.Reader
}

// startRaw starts the helper at path and has it launch the test target in
// mode; it returns once the helper has answered started.
func startRaw(tb testing.TB, path, id, mode string) *rawSession {
	tb.Helper()
	cmd := exec.Command(path)
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	s := &rawSession{cmd: cmd, in: in, fw: wire.NewWriter(in), fr: wire.NewReader(out, wire.MaxFrameLen)}
	if f, err := s.fr.Next(); err != nil || f.Type != wire.FrameHello {
		s.kill()
		tb.Fatalf("hello: %v %v", f.Type, err)
	}
	req, _ := json.Marshal(wire.LaunchRequest{
		ActivationID: id, Command: targetBin.Out, Args: []string{mode},
		EOFGraceNS: int64(100 * time.Millisecond), TermGraceNS: int64(100 * time.Millisecond),
		KillGraceNS: int64(time.Second), PipeGraceNS: int64(100 * time.Millisecond),
	})
	if err := s.fw.WriteFrame(wire.FrameLaunch, req); err != nil {
		s.kill()
		tb.Fatal(err)
	}
	f, err := s.fr.Next()
	var st wire.Started
	if err == nil && f.Type == wire.FrameStarted {
		err = json.Unmarshal(f.Payload, &st)
	}
	if err != nil || f.Type != wire.FrameStarted || st.Error != "" {
		s.kill()
		tb.Fatalf("started: %v %v %q", f.Type, err, st.Error)
	}
	return s
}

// close asks for cleanup, reads frames up to the receipt, and reaps the
// helper.
func (s *rawSession) close(tb testing.TB) {
	tb.Helper()
	err := s.fw.WriteFrame(wire.FrameControl, []byte{wire.ControlClose})
	_ = s.in.Close()
	for err == nil {
		var f wire.Frame
		if f, err = s.fr.Next(); err == nil && f.Type == wire.FrameReceipt {
			break
		}
	}
	if werr := s.cmd.Wait(); err != nil || werr != nil {
		tb.Errorf("helper %d: receipt %v, exit %v", s.cmd.Process.Pid, err, werr)
	}
}

func (s *rawSession) kill() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}
