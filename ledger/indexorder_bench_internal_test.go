package ledger

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/leaseledger/leaseledger/events"
)

// BenchmarkIndexOrder applies the same batches, six events each as a
// gateway call over HTTP writes (each event under one of 64 activations
// and 64 sessions, six kinds), to two memtables of 120 000 such events:
// one batch with its index entries in key order (indexKeys.writeTo, as the
// committer writes them), the other with them in sealing order (each
// event's entries after its record, as before), interleaved. It reports
// the mean time to apply a batch on each side and their ratio
// (apply-ratio, key order over sealing order). Only the memtable is
// measured: no WAL.
//
//	go test -run '^$' -bench IndexOrder -benchtime 20000x ./ledger/
func BenchmarkIndexOrder(b *testing.B) {
	open := func() *pebble.DB {
		db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: twinQuiet{}, DisableWAL: true, MemTableSize: 256 << 20})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		return db
	}
	kinds := []events.Kind{"call.admitted", "http.registered", "http.hop", "http.settled", "call.finished", "connection.barrier"}
	raw := bytes.Repeat([]byte{'x'}, 300)
	var buf []byte
	var ix indexKeys
	// batch builds the batch of events seq+1..seq+6 on db, its index
	// entries in key order or in sealing order.
	batch := func(db *pebble.DB, seq uint64, keyOrder bool) *pebble.Batch {
		bt := db.NewBatch()
		for i := range uint64(6) {
			s := seq + 1 + i
			env := events.Envelope{Seq: Seq(s), Kind: kinds[s%6],
				Activation: fmt.Sprintf("act-%016x", s/6%64*0x9e3779b9), Session: fmt.Sprintf("s-%016x", s/6%64*0x85ebca6b)}
			buf = setEvent(bt, buf, &ix, &env, raw)
			if !keyOrder {
				for _, sp := range ix.spans {
					_ = bt.Set(ix.buf[sp[0]:sp[1]], nil, nil)
				}
				ix.buf, ix.spans = ix.buf[:0], ix.spans[:0]
			}
		}
		ix.writeTo(bt) // nothing left in sealing order
		return bt
	}
	const preload = 20_000 // batches: 120 000 events
	dbs := [2]*pebble.DB{open(), open()}
	for side, db := range dbs {
		for i := range uint64(preload) {
			bt := batch(db, i*6, side == 0)
			if err := db.Apply(bt, pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			_ = bt.Close()
		}
	}
	var spent [2]time.Duration
	b.ResetTimer()
	for n := range b.N {
		seq := uint64(preload+n) * 6
		for k := range 2 {
			side := (n + k) % 2 // alternating which goes first
			bt := batch(dbs[side], seq, side == 0)
			t := time.Now()
			if err := dbs[side].Apply(bt, pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			spent[side] += time.Since(t)
			_ = bt.Close()
		}
	}
	b.StopTimer()
	keyOrder, sealing := spent[0].Seconds()/float64(b.N), spent[1].Seconds()/float64(b.N)
	b.ReportMetric(keyOrder*1e6, "key-order-µs/batch")
	b.ReportMetric(sealing*1e6, "sealing-order-µs/batch")
	b.ReportMetric(keyOrder/sealing, "apply-ratio")
	b.ReportMetric(0, "ns/op")
}
