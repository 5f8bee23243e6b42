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
// (the live part serve decodes at every start) as Unmarshal does it (one
// pass, the fast decoder) against the reference decoder alone in one pass
// and against the reference reading the header first, alternating in one
// run: it reports all three and the ratios fast/reference ("ratio") and
// fast/header-first; below 1 is the gain.
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
	sides := []func([]byte) (*projector.State, error){projector.Unmarshal, projector.UnmarshalStrictForTest, projector.UnmarshalHeaderFirstForTest}
	var spent [3]time.Duration
	b.ResetTimer()
	for i := range b.N {
		for k := range sides {
			j := (i + k) % len(sides) // each side first in turn
			t := time.Now()
			if _, err := sides[j](snap); err != nil {
				b.Fatal(err)
			}
			spent[j] += time.Since(t)
		}
	}
	b.ReportMetric(float64(len(snap)), "snapshot-bytes")
	b.ReportMetric(float64(spent[0].Microseconds())/float64(b.N), "fast-µs")
	b.ReportMetric(float64(spent[1].Microseconds())/float64(b.N), "reference-µs")
	b.ReportMetric(float64(spent[2].Microseconds())/float64(b.N), "header-first-µs")
	b.ReportMetric(float64(spent[0])/float64(spent[1]), "ratio")
	b.ReportMetric(float64(spent[0])/float64(spent[2]), "ratio-header-first")
}
