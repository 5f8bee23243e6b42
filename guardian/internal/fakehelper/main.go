// Command fakehelper impersonates the guardian helper badly, for the host
// side's failure tests. LEASELEDGER_FAKE_HELPER picks the misbehaviour:
//
//	wrongversion  a well-formed hello with another protocol and version
//	garbage       bytes that are not a frame
//	silent        no hello at all (sleeps)
//	exit          exits 1 before any hello
//	noreceipt     a correct hello and launch answer (pretending its own pid
//	              is the target's), then exits 0 at close without a receipt
//	closepipes    like noreceipt, but closes its stdout at close and keeps
//	              running, without a receipt, until SIGTERM; then exits 0
//	deafclose     like noreceipt, but ignores the close frame and its stdin
//	              EOF; only SIGTERM makes it send a (correlated, complete)
//	              receipt with trigger "signal" and exit 0
//
// It never starts a target, so a test can also prove no target launched. It
// speaks the protocol through package wire, as the real helper does.
package main

import (
	"encoding/json"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

func main() {
	mode := os.Getenv("LEASELEDGER_FAKE_HELPER")
	fw := wire.NewWriter(os.Stdout)
	fr := wire.NewReader(os.Stdin, wire.MaxFrameLen)
	switch mode {
	case "wrongversion":
		b, _ := json.Marshal(wire.Hello{Protocol: 99, Version: "leaseledger-guardian/9.9.9", PID: os.Getpid()})
		_ = fw.WriteFrame(wire.FrameHello, b)
		// Wait for the host to end us; a launch frame would be a bug.
		if f, err := fr.Next(); err == nil && f.Type == wire.FrameLaunch {
			os.Exit(7)
		}
		return
	case "garbage":
		_, _ = os.Stdout.Write([]byte("this is not a frame at all\n"))
		time.Sleep(time.Minute) // until the host kills us
		return
	case "silent":
		time.Sleep(time.Minute) // until the host kills us
		return
	case "exit":
		os.Exit(1)
	case "deafclose":
		term := notifyTerm()
		req, started := handshake(fw, fr)
		go discard(fr) // the close frame and EOF included
		<-term
		now := time.Now().UTC()
		pf := &wire.PipeFact{ClosedAt: now}
		b, _ := json.Marshal(wire.Receipt{ActivationID: req.ActivationID, HelperVersion: wire.HelperVersion,
			HelperPID: os.Getpid(), TargetPID: os.Getpid(), StartedAt: started, Trigger: wire.TriggerSignal,
			Reaped: true, ReapedAt: &now, Stdin: pf, Stdout: pf, Stderr: pf, FinishedAt: now})
		_ = fw.WriteFrame(wire.FrameReceipt, b)
		return
	case "noreceipt":
		handshake(fw, fr)
		awaitClose(fr)
		return
	case "closepipes":
		term := notifyTerm()
		handshake(fw, fr)
		awaitClose(fr)
		_ = os.Stdout.Close()
		go discard(fr)
		<-term
		return
	}
	os.Exit(2)
}

// notifyTerm returns a channel that receives SIGTERM.
func notifyTerm() <-chan os.Signal {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	return term
}

// handshake sends a correct hello, reads the launch request and answers it
// as if this process were the target.
func handshake(fw *wire.Writer, fr *wire.Reader) (wire.LaunchRequest, time.Time) {
	b, _ := json.Marshal(wire.Hello{Protocol: wire.ProtocolVersion, Version: wire.HelperVersion, PID: os.Getpid()})
	_ = fw.WriteFrame(wire.FrameHello, b)
	f, err := fr.Next()
	if err != nil || f.Type != wire.FrameLaunch {
		os.Exit(2)
	}
	var req wire.LaunchRequest
	_ = json.Unmarshal(f.Payload, &req)
	started := time.Now().UTC()
	b, _ = json.Marshal(wire.Started{ActivationID: req.ActivationID, HelperPID: os.Getpid(), TargetPID: os.Getpid(), At: started})
	_ = fw.WriteFrame(wire.FrameStarted, b)
	return req, started
}

// awaitClose reads host frames until the close frame or the end of input.
func awaitClose(fr *wire.Reader) {
	for {
		f, err := fr.Next()
		if err != nil || f.Type == wire.FrameControl && len(f.Payload) == 1 && f.Payload[0] == wire.ControlClose {
			return
		}
	}
}

// discard reads and ignores host frames until the end of input.
func discard(fr *wire.Reader) {
	for {
		if _, err := fr.Next(); err != nil {
			return
		}
	}
}
