package projector_test

import (
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

func sealWorkload(n int) ([]events.Envelope, [][]byte) {
	c := eventgen.NewChain(t0)
	ds := eventgen.Workload(n, max(n/2000, 1))
	envs := make([]events.Envelope, len(ds))
	raws := make([][]byte, len(ds))
	for i, d := range ds {
		envs[i], raws[i] = c.Seal(d)
	}
	return envs, raws
}

// BenchmarkApplyRaw is the projector's in-memory replay cost per stored
// event (decode from canonical bytes + reduce), without storage.
//
//	go test -run '^$' -bench 'Apply' ./projector/
func BenchmarkApplyRaw(b *testing.B) {
	_, raws := sealWorkload(200_000)
	b.ResetTimer()
	for i := 0; i < b.N; {
		s := projector.New()
		for _, raw := range raws {
			if err := s.ApplyRaw(raw); err != nil {
				b.Fatal(err)
			}
			if i++; i == b.N {
				break
			}
		}
	}
}

// BenchmarkApplyEnvelope is the live path's cost per decoded envelope.
func BenchmarkApplyEnvelope(b *testing.B) {
	envs, _ := sealWorkload(200_000)
	b.ResetTimer()
	for i := 0; i < b.N; {
		s := projector.New()
		for j := range envs {
			if err := s.Apply(&envs[j]); err != nil {
				b.Fatal(err)
			}
			if i++; i == b.N {
				break
			}
		}
	}
}

// BenchmarkStrictDecode is what replay would cost per event through
// events.Decode and Envelope.Payload, for comparison.
func BenchmarkStrictDecode(b *testing.B) {
	_, raws := sealWorkload(200_000)
	b.ResetTimer()
	for i := range b.N {
		env, err := events.Decode(raws[i%len(raws)])
		if err != nil {
			b.Fatal(err)
		}
		if _, err := env.Payload(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnmarshalSnapshot measures restoring a state from its snapshot
// (the live part serve decodes at every start) in one pass against the
// header-first reading it replaced, alternating in one run: it reports
// both and their ratio (one-pass/header-first; below 1 is the gain).
//
//	go test -run '^$' -bench UnmarshalSnapshot ./projector/
func BenchmarkUnmarshalSnapshot(b *testing.B) {
	_, raws := sealWorkload(20_000)
	s := projector.New()
	for _, raw := range raws {
		if err := s.ApplyRaw(raw); err != nil {
			b.Fatal(err)
		}
	}
	snap := mustMarshal(b, s)
	var onePass, headerFirst time.Duration
	b.ResetTimer()
	for range b.N {
		t := time.Now()
		if _, err := projector.Unmarshal(snap); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := projector.UnmarshalHeaderFirstForTest(snap); err != nil {
			b.Fatal(err)
		}
		onePass += t1.Sub(t)
		headerFirst += time.Since(t1)
	}
	b.ReportMetric(float64(len(snap)), "snapshot-bytes")
	b.ReportMetric(float64(onePass.Microseconds())/float64(b.N), "one-pass-µs")
	b.ReportMetric(float64(headerFirst.Microseconds())/float64(b.N), "header-first-µs")
	b.ReportMetric(float64(onePass)/float64(headerFirst), "ratio")
}
