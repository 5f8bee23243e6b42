package projector_test

import (
	"testing"

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
