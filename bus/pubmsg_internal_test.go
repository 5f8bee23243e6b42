package bus

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/oklog/ulid/v2"
)

// randomRecord is a record with a random kind, activation (sometimes
// none), ULID and seq of any size.
func randomRecord(rng *rand.Rand, kinds []events.Kind) ledger.Record {
	var id ulid.ULID
	for i := range id {
		id[i] = byte(rng.Uint32())
	}
	act := []string{"", "act-1", "a", "0123456789abcdef0123456789abcdef"}[rng.IntN(4)]
	seq := []uint64{1, 9, 10, 99, 100, 12345, rng.Uint64()}[rng.IntN(7)]
	raw := []byte(strconv.Itoa(rng.Int()))
	return ledger.Record{Env: events.Envelope{Seq: events.Seq(seq), ID: id, Kind: kinds[rng.IntN(len(kinds))], Activation: act}, Raw: raw}
}

// TestPubMsgTwin: the message publish builds for an event, in a host's
// space or the bare one, has the subject and header values the per-event
// strings gave (sp.subject(Env.Subject()), ID.String(), the decimal seq)
// and the stored bytes as data, byte for byte, event after event through
// the same reused message; clear leaves none of them in it.
func TestPubMsgTwin(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := events.Kinds()
	for _, host := range []string{"", "h1", "host-with-a-long-name"} {
		sp := &space{host: host}
		prefix := sp.subject(events.SubjectPrefix)
		m := newPubMsg()
		for range 2000 {
			r := randomRecord(rng, kinds)
			m.set(prefix, &r)
			if want := sp.subject(r.Env.Subject()); m.msg.Subject != want {
				t.Fatalf("host %q: subject %q, want %q", host, m.msg.Subject, want)
			}
			if got, want := m.msg.Header.Get(busclient.HeaderMsgID), r.Env.ID.String(); got != want {
				t.Fatalf("msg id %q, want %q", got, want)
			}
			if got, want := m.msg.Header.Get(busclient.HeaderSeq), strconv.FormatUint(uint64(r.Env.Seq), 10); got != want {
				t.Fatalf("seq %q, want %q", got, want)
			}
			if len(m.msg.Header) != 2 || len(m.msg.Data) != len(r.Raw) || &m.msg.Data[0] != &r.Raw[0] {
				t.Fatalf("header %v, data %q for raw %q", m.msg.Header, m.msg.Data, r.Raw)
			}
		}
		m.clear()
		if m.msg.Subject != "" || m.msg.Data != nil || m.msg.Header.Get(busclient.HeaderMsgID) != "" || m.msg.Header.Get(busclient.HeaderSeq) != "" {
			t.Fatalf("after clear: %+v", m.msg)
		}
	}
}

// TestPubMsgAllocs: once its buffer has grown, setting the message for an
// event allocates nothing.
func TestPubMsgAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	r := randomRecord(rng, events.Kinds())
	r.Env.Seq = 1 << 40
	sp := &space{host: "h1"}
	prefix := sp.subject(events.SubjectPrefix)
	m := newPubMsg()
	m.set(prefix, &r)
	if a := testing.AllocsPerRun(100, func() { m.set(prefix, &r) }); a != 0 {
		t.Fatalf("%.1f allocations per event, want 0", a)
	}
}

// BenchmarkPubMsg compares, in one run, filling the published message of
// an event with per-event strings (what publish did before: Env.Subject,
// ID.String, strconv.FormatUint) and with set's reused buffer. Compare
// their ns/op and allocs/op.
func BenchmarkPubMsg(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	recs := make([]ledger.Record, 256)
	for i := range recs {
		recs[i] = randomRecord(rng, events.Kinds())
		recs[i].Env.Seq = events.Seq(1_000_000 + i)
	}
	sp := &space{host: "h1"}
	b.Run("strings", func(b *testing.B) {
		m := newPubMsg()
		i := 0
		for b.Loop() {
			r := &recs[i%len(recs)]
			i++
			m.msg.Subject, m.msg.Data = sp.subject(r.Env.Subject()), r.Raw
			m.id[0], m.seq[0] = r.Env.ID.String(), strconv.FormatUint(uint64(r.Env.Seq), 10)
		}
	})
	b.Run("buffer", func(b *testing.B) {
		m, prefix := newPubMsg(), sp.subject(events.SubjectPrefix) // once per batch in publish
		i := 0
		for b.Loop() {
			r := &recs[i%len(recs)]
			i++
			m.set(prefix, r)
		}
	})
}
