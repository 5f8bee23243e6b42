package verify

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"golang.org/x/mod/sumdb/note"
)

// BundleSelector chooses what a bundle exports: the range From..To, or
// every event of Activation up to the checkpoint. Set one of the two.
type BundleSelector struct {
	From, To   ledger.Seq
	Activation string
	// ConsistentWith are signed checkpoints (an earlier 'checkpoint'
	// output, a witness's state file) the bundle's checkpoint must
	// extend: the header carries a consistency proof from each, which
	// BundleReader.Extends checks. A log that does not extend one (a
	// fork, a rollback, another origin) cannot be exported: ErrBundle
	// with ErrCheckpoint or ErrProof. At most MaxBundleConsistency.
	ConsistentWith [][]byte
}

// bundleChunk is how many events WriteBundle reads before it computes
// their proofs: it bounds the bytes held at once (bundleChunk ×
// events.MaxEventBytes), and no proof is asked while a scan is running.
const bundleChunk = 256

// WriteBundle writes to w a bundle of the events sel selects from l: it
// makes the checkpoint of l's durable head (CheckpointAt) under origin,
// signs it and the manifest with signer, and writes every selected event
// with its inclusion proof against that checkpoint. Its errors wrap
// ErrBundle (ErrBundleLimit past MaxBundleEvents). Memory holds the
// selected seqs as runs and bundleChunk events.
func WriteBundle(ctx context.Context, w io.Writer, l *ledger.Ledger, signer note.Signer, origin string, sel BundleSelector) (BundleReport, error) {
	if err := checkOrigin(origin); err != nil {
		return BundleReport{}, fmt.Errorf("%w: %w", ErrBundle, err)
	}
	size := l.Head().Seq
	m := Manifest{Origin: origin, Size: size, Activation: sel.Activation}
	switch {
	case sel.Activation != "" && (sel.From != 0 || sel.To != 0):
		return BundleReport{}, fmt.Errorf("%w: select a range or an activation, not both", ErrBundle)
	case sel.Activation != "":
		if !events.ValidID(sel.Activation) {
			return BundleReport{}, fmt.Errorf("%w: activation: want %s", ErrBundle, events.IDRule)
		}
		if err := bundleRuns(ctx, l, size, &m); err != nil {
			return BundleReport{}, err
		}
		if m.Events == 0 {
			return BundleReport{}, fmt.Errorf("%w: no events of activation %s up to seq %d", ErrBundle, sel.Activation, size)
		}
	default:
		if sel.From == 0 || sel.From > sel.To || sel.To > size {
			return BundleReport{}, fmt.Errorf("%w: range %d-%d: want 1 ≤ first ≤ last ≤ the head (%d)", ErrBundle, sel.From, sel.To, size)
		}
		if n := sel.To - sel.From + 1; n > MaxBundleEvents {
			return BundleReport{}, fmt.Errorf("%w: %w: %d events, limit MaxBundleEvents=%d", ErrBundle, ErrBundleLimit, n, MaxBundleEvents)
		}
		m.From, m.To, m.Events = sel.From, sel.To, int(sel.To-sel.From+1)
		m.Seqs = []SeqRun{{sel.From, sel.To}}
	}
	cp, err := CheckpointAt(ctx, l, origin, size)
	if err != nil {
		return BundleReport{}, fmt.Errorf("%w: %w", ErrBundle, err)
	}
	m.Root = cp.Root
	var proofs []bundleConsistency
	if len(sel.ConsistentWith) > MaxBundleConsistency {
		return BundleReport{}, fmt.Errorf("%w: %w: more than MaxBundleConsistency=%d checkpoints", ErrBundle, ErrBundleLimit, MaxBundleConsistency)
	}
	for _, signed := range sel.ConsistentWith {
		p, err := consistencyFrom(ctx, l, cp, signed)
		if err != nil {
			return BundleReport{}, err
		}
		proofs = append(proofs, p)
	}
	signedCP, err := cp.Sign(signer)
	if err != nil {
		return BundleReport{}, fmt.Errorf("%w: %w", ErrBundle, err)
	}
	signedM, err := note.Sign(&note.Note{Text: m.Text()}, signer)
	if err != nil {
		return BundleReport{}, fmt.Errorf("%w: sign the manifest: %w", ErrBundle, err)
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	h, err := json.Marshal(bundleHeader{Format: BundleFormat, Checkpoint: string(signedCP), Manifest: string(signedM), Consistency: proofs})
	if err != nil {
		return BundleReport{}, fmt.Errorf("%w: %w", ErrBundle, err)
	}
	bw.Write(h)
	bw.WriteByte('\n')
	var line []byte
	for _, r := range m.Seqs {
		for first := r.First; first <= r.Last; first += bundleChunk {
			last := min(first+bundleChunk-1, r.Last)
			var raws [][]byte
			err := l.Scan(ctx, ledger.Query{From: first, To: last}, func(_ ledger.Seq, raw []byte) error {
				raws = append(raws, append([]byte(nil), raw...))
				return nil
			})
			if err == nil && len(raws) != int(last-first+1) {
				err = fmt.Errorf("seqs %d-%d: read %d events", first, last, len(raws))
			}
			if err != nil {
				return BundleReport{}, fmt.Errorf("%w: read the log: %w", ErrBundle, err)
			}
			for i, raw := range raws {
				seq := first + ledger.Seq(i)
				hashes, err := l.InclusionProof(ctx, seq, size)
				if err != nil {
					return BundleReport{}, fmt.Errorf("%w: proof of seq %d: %w", ErrBundle, seq, err)
				}
				line = appendBundleLine(line[:0], seq, raw, hashes)
				if _, err := bw.Write(line); err != nil {
					return BundleReport{}, fmt.Errorf("%w: write: %w", ErrBundle, err)
				}
			}
			if err := ctx.Err(); err != nil {
				return BundleReport{}, err
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return BundleReport{}, fmt.Errorf("%w: write: %w", ErrBundle, err)
	}
	return BundleReport{Checkpoint: cp, Manifest: m}, nil
}

// consistencyFrom makes the header's consistency proof from the signed
// checkpoint old to cp, and checks it as the reader will: a log that does
// not extend old cannot be given one.
func consistencyFrom(ctx context.Context, l *ledger.Ledger, cp Checkpoint, signed []byte) (bundleConsistency, error) {
	old, err := parseUnverified(signed)
	if err != nil {
		return bundleConsistency{}, fmt.Errorf("%w: consistent-with: %w", ErrBundle, err)
	}
	fail := func(err error) (bundleConsistency, error) {
		return bundleConsistency{}, fmt.Errorf("%w: consistent-with: %s: %w", ErrBundle, forkDetail(old.Size), err)
	}
	switch {
	case old.Origin != cp.Origin:
		return fail(fmt.Errorf("%w: its origin is %q, the bundle's %q", ErrCheckpoint, old.Origin, cp.Origin))
	case old.Size > cp.Size:
		return fail(fmt.Errorf("%w: it covers %d events, the log holds %d", ErrCheckpoint, old.Size, cp.Size))
	}
	var hashes [][]byte
	if old.Size > 0 && old.Size < cp.Size {
		if hashes, err = l.ConsistencyProof(ctx, old.Size, cp.Size); err != nil {
			return fail(err)
		}
	}
	// The proof is checked, and so are old's chain hash and whether this
	// log's own prefix is old (a Merkle root alone would not name seq).
	if err := VerifyConsistency(old, cp, hashes); err != nil {
		return fail(err)
	}
	if _, err := matchCheckpoint(ctx, l, signed); err != nil {
		return fail(err)
	}
	return bundleConsistency{Checkpoint: string(signed), Proof: encodeProof(hashes)}, nil
}

// appendBundleLine appends one event line. It is written by hand so that
// the event's canonical bytes go out verbatim (encoding/json would
// re-escape them).
func appendBundleLine(b []byte, seq ledger.Seq, raw []byte, hashes [][]byte) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, uint64(seq), 10)
	b = append(b, `,"event":`...)
	b = append(b, raw...)
	b = append(b, `,"proof":[`...)
	for i, h := range hashes {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, h)
		b = append(b, '"')
	}
	return append(b, "]}\n"...)
}

// bundleRuns lists, as runs in m, the seqs up to size of m.Activation's
// events.
func bundleRuns(ctx context.Context, l *ledger.Ledger, size ledger.Seq, m *Manifest) error {
	if size == 0 {
		return nil
	}
	err := l.Scan(ctx, ledger.Query{Activation: m.Activation, To: size}, func(seq ledger.Seq, _ []byte) error {
		if m.Events++; m.Events > MaxBundleEvents {
			return fmt.Errorf("%w: %w: activation %s has more than MaxBundleEvents=%d events", ErrBundle, ErrBundleLimit, m.Activation, MaxBundleEvents)
		}
		if n := len(m.Seqs); n > 0 && m.Seqs[n-1].Last+1 == seq {
			m.Seqs[n-1].Last = seq
		} else {
			m.Seqs = append(m.Seqs, SeqRun{seq, seq})
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrBundleLimit) {
		err = fmt.Errorf("%w: read the log: %w", ErrBundle, err)
	}
	return err
}
