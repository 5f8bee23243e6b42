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
//	              running until its stdin closes
//	deafclose     like noreceipt, but ignores the close frame and its stdin
//	              EOF; only SIGTERM makes it send a (correlated, complete)
//	              receipt with trigger "signal" and exit 0
//
// It never starts a target, so a test can also prove no target launched.
package main

import (
	"encoding/json"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leaseledger/leaseledger/guardian"
)

func main() {
	mode := os.Getenv("LEASELEDGER_FAKE_HELPER")
	fw := guardian.NewFrameWriter(os.Stdout)
	switch mode {
	case "wrongversion":
		b, _ := json.Marshal(guardian.Hello{Protocol: 99, Version: "leaseledger-guardian/9.9.9", PID: os.Getpid()})
		_ = fw.WriteFrame(guardian.FrameHello, b)
		// Wait for the host to end us; a launch frame would be a bug.
		fr := guardian.NewFrameReader(os.Stdin, guardian.MaxFrameLen)
		if f, err := fr.Next(); err == nil && f.Type == guardian.FrameLaunch {
			os.Exit(7)
		}
		return
	case "garbage":
		_, _ = os.Stdout.Write([]byte("this is not a frame at all\n"))
		time.Sleep(time.Minute)
		return
	case "silent":
		time.Sleep(time.Minute)
		return
	case "exit":
		os.Exit(1)
	case "deafclose":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		b, _ := json.Marshal(guardian.Hello{Protocol: guardian.ProtocolVersion, Version: guardian.HelperVersion, PID: os.Getpid()})
		_ = fw.WriteFrame(guardian.FrameHello, b)
		fr := guardian.NewFrameReader(os.Stdin, guardian.MaxFrameLen)
		f, err := fr.Next()
		if err != nil || f.Type != guardian.FrameLaunch {
			os.Exit(2)
		}
		var req guardian.LaunchRequest
		_ = json.Unmarshal(f.Payload, &req)
		started := time.Now().UTC()
		b, _ = json.Marshal(guardian.Started{ActivationID: req.ActivationID, HelperPID: os.Getpid(), TargetPID: os.Getpid(), At: started})
		_ = fw.WriteFrame(guardian.FrameStarted, b)
		go func() { // read and ignore everything, close frame and EOF included
			for {
				if _, err := fr.Next(); err != nil {
					return
				}
			}
		}()
		<-term
		now := time.Now().UTC()
		pf := &guardian.PipeFact{ClosedAt: now}
		b, _ = json.Marshal(guardian.Receipt{ActivationID: req.ActivationID, HelperVersion: guardian.HelperVersion,
			HelperPID: os.Getpid(), TargetPID: os.Getpid(), StartedAt: started, Trigger: "signal",
			Reaped: true, ReapedAt: &now, Stdin: pf, Stdout: pf, Stderr: pf, FinishedAt: now})
		_ = fw.WriteFrame(guardian.FrameReceipt, b)
		return
	case "noreceipt", "closepipes":
		b, _ := json.Marshal(guardian.Hello{Protocol: guardian.ProtocolVersion, Version: guardian.HelperVersion, PID: os.Getpid()})
		_ = fw.WriteFrame(guardian.FrameHello, b)
		fr := guardian.NewFrameReader(os.Stdin, guardian.MaxFrameLen)
		f, err := fr.Next()
		if err != nil || f.Type != guardian.FrameLaunch {
			os.Exit(2)
		}
		var req guardian.LaunchRequest
		_ = json.Unmarshal(f.Payload, &req)
		b, _ = json.Marshal(guardian.Started{ActivationID: req.ActivationID, HelperPID: os.Getpid(), TargetPID: os.Getpid(), At: time.Now()})
		_ = fw.WriteFrame(guardian.FrameStarted, b)
		for {
			f, err := fr.Next()
			if err != nil {
				return
			}
			if f.Type == guardian.FrameControl && f.Payload[0] == guardian.ControlClose {
				if mode == "closepipes" {
					_ = os.Stdout.Close()
					for {
						if _, err := fr.Next(); err != nil {
							time.Sleep(300 * time.Millisecond)
							return
						}
					}
				}
				return
			}
		}
	}
	os.Exit(2)
}
