package verify

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/schemas"
	"golang.org/x/mod/sumdb/note"
)

// An evidence bundle carries a range of the log, or one activation's
// events, to someone who holds only the verifier key: it is a JSON Lines
// file whose first line is a header
//
//	{"format":"leaseledger-bundle/1","checkpoint":"<signed checkpoint>","manifest":"<signed manifest>",
//	 "consistency":[{"checkpoint":"<older signed checkpoint>","proof":["<base64 hash>",…]},…]}
//
// ("consistency" only when the exporter was asked for it: one RFC 6962
// consistency proof from each older checkpoint to the bundle's)
// and every further line one exported event, in increasing seq order,
//
//	{"seq":N,"event":<canonical event bytes, verbatim>,"proof":["<base64 hash>",…]}
//
// with its RFC 6962 inclusion proof against the checkpoint. The manifest is
// a signed note (same key as the checkpoint) whose text is
//
//	leaseledger-bundle/1
//	origin <the checkpoint's origin>
//	checkpoint <size> <root, base64>
//	range <first> <last>        — or —   activation <id>
//	events <count>
//	seqs <runs: "1-400,405,407-409">
//
// It binds the selection to the checkpoint and lists exactly the seqs the
// bundle holds, so a dropped, added or reordered event line is named. The
// proofs tie each event to the signed root, so a changed byte, or an event
// of another (forked) history, is named too.
//
// Every line must be exactly the encoding the exporter writes (decoded,
// re-encoded and compared byte for byte), ending in a newline, so that no
// changed byte of a bundle still verifies.
//
// Alone, a bundle proves that the key's holder signed a checkpoint whose
// log holds these events at these seqs. It cannot prove that this log is
// the one an auditor saw earlier: whoever holds the signer key and the data
// directory can rewrite a tail, re-seal it and sign a new checkpoint. That
// is what a consistency proof is for: BundleReader.Extends(old) checks,
// for a checkpoint the auditor already trusts, that the bundle's
// checkpoint extends it (the exporter cannot make that proof for a forked
// log).

// BundleFormat is the format tag of a bundle's header and manifest.
const BundleFormat = "leaseledger-bundle/1"

// Bounds of a bundle. A bundle that would exceed one, or a file that does,
// is refused with an error wrapping ErrBundleLimit.
const (
	// MaxBundleEvents bounds the events of one bundle.
	MaxBundleEvents = 1 << 20
	// MaxBundleLine bounds one event line: the largest event
	// (events.MaxEventBytes) plus its seq and a proof of up to 64 hashes.
	MaxBundleLine = events.MaxEventBytes + 8<<10
	// MaxBundleHeader bounds the header line, whose manifest lists up to
	// MaxBundleEvents seqs (at most 21 bytes each, as singleton runs).
	MaxBundleHeader = 32 << 20
)

// Bundle errors callers branch on. Verification failures are *Error with
// Op "bundle" (errors.Is(err, ErrVerify)); ErrBundleLimit is also their
// Cause when a bound was hit.
var (
	// ErrBundle is wrapped by every failure to make a bundle.
	ErrBundle = errors.New("verify: bundle")
	// ErrBundleLimit: a bundle or one of its lines exceeds a bound above.
	ErrBundleLimit = errors.New("verify: bundle exceeds a bound")
)

// Faults of proofs and bundles, besides the per-event faults of a log
// (undecodable, seq_mismatch, bad_hash, broken_link, schema_invalid).
const (
	// FaultSignature: the header is malformed, or its checkpoint or
	// manifest does not carry a valid signature of the verifier key.
	FaultSignature Fault = "signature"
	// FaultManifest: the manifest is malformed or does not name the
	// header's checkpoint.
	FaultManifest Fault = "manifest"
	// FaultLine: an event line is not a bundle line (or exceeds MaxBundleLine).
	FaultLine Fault = "line"
	// FaultProof: an inclusion or consistency proof does not verify
	// against its checkpoint(s); in a bundle, a changed event or one of
	// another (forked) history.
	FaultProof Fault = "proof"
	// FaultMissing: the manifest lists this seq but the bundle lacks it.
	FaultMissing Fault = "missing"
	// FaultUnexpected: an event line the manifest does not list at this
	// point (extra, duplicated or out of order).
	FaultUnexpected Fault = "unexpected"
	// FaultActivation: an activation bundle holds an event of another
	// activation.
	FaultActivation Fault = "activation"
	// FaultFork: the bundle does not prove that its history extends a
	// checkpoint the auditor trusts (no consistency proof from it, or one
	// that does not verify).
	FaultFork Fault = "fork"
)

// MaxBundleConsistency bounds the consistency proofs of one bundle.
const MaxBundleConsistency = 64

// SeqRun is a run of consecutive seqs First..Last.
type SeqRun struct{ First, Last ledger.Seq }

// Manifest is the content of a bundle's signed manifest.
type Manifest struct {
	Origin string
	Size   ledger.Seq // the checkpoint's size
	Root   []byte     // the checkpoint's root
	// From, To: the range selected (a range bundle); Activation: the
	// activation selected (an activation bundle). Exactly one is set.
	From, To   ledger.Seq
	Activation string
	Events     int      // number of exported events
	Seqs       []SeqRun // the exported seqs, increasing, as maximal runs
}

// Text is the manifest's note text (the signed body).
func (m *Manifest) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\norigin %s\ncheckpoint %d %s\n", BundleFormat, m.Origin, m.Size, base64.StdEncoding.EncodeToString(m.Root))
	if m.Activation != "" {
		fmt.Fprintf(&b, "activation %s\n", m.Activation)
	} else {
		fmt.Fprintf(&b, "range %d %d\n", m.From, m.To)
	}
	fmt.Fprintf(&b, "events %d\nseqs ", m.Events)
	for i, r := range m.Seqs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(r.First), 10))
		if r.Last != r.First {
			b.WriteByte('-')
			b.WriteString(strconv.FormatUint(uint64(r.Last), 10))
		}
	}
	b.WriteByte('\n')
	return b.String()
}

// parseManifest parses and checks a manifest's text: well formed, runs
// increasing and within 1..Size, their total the event count, a range
// bundle exporting exactly its range.
func parseManifest(text string) (Manifest, error) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 6 || lines[0] != BundleFormat {
		return Manifest{}, errors.New("want the format line and origin, checkpoint, selector, events and seqs lines")
	}
	var m Manifest
	var ok bool
	if m.Origin, ok = strings.CutPrefix(lines[1], "origin "); !ok || checkOrigin(m.Origin) != nil {
		return Manifest{}, errors.New("malformed origin line")
	}
	f := strings.Fields(lines[2])
	if len(f) != 3 || f[0] != "checkpoint" {
		return Manifest{}, errors.New("malformed checkpoint line")
	}
	size, err := parseSeq(f[1])
	root, rerr := base64.StdEncoding.DecodeString(f[2])
	if err != nil || rerr != nil || len(root) != 32 {
		return Manifest{}, errors.New("malformed checkpoint line")
	}
	m.Size, m.Root = size, root
	f = strings.Fields(lines[3])
	switch {
	case len(f) == 2 && f[0] == "activation" && events.ValidID(f[1]):
		m.Activation = f[1]
	case len(f) == 3 && f[0] == "range":
		from, err1 := parseSeq(f[1])
		to, err2 := parseSeq(f[2])
		if err1 != nil || err2 != nil || from == 0 || from > to {
			return Manifest{}, errors.New("malformed range line")
		}
		m.From, m.To = from, to
	default:
		return Manifest{}, errors.New("malformed selector line")
	}
	n, err := strconv.Atoi(strings.TrimPrefix(lines[4], "events "))
	if !strings.HasPrefix(lines[4], "events ") || err != nil || n < 1 {
		return Manifest{}, errors.New("malformed events line")
	}
	if n > MaxBundleEvents {
		return Manifest{}, fmt.Errorf("%w: %d events, limit MaxBundleEvents=%d", ErrBundleLimit, n, MaxBundleEvents)
	}
	m.Events = n
	runs, ok := strings.CutPrefix(lines[5], "seqs ")
	if !ok {
		return Manifest{}, errors.New("malformed seqs line")
	}
	total, last := 0, ledger.Seq(0)
	for r := range strings.SplitSeq(runs, ",") {
		a, b, isRun := strings.Cut(r, "-")
		first, err := parseSeq(a)
		end := first
		if err == nil && isRun {
			end, err = parseSeq(b)
		}
		// Runs are maximal: each starts past the seq after the previous one.
		if err != nil || first <= last+1 && last != 0 || first == 0 || end < first || end > size || isRun && end == first {
			return Manifest{}, errors.New("malformed seqs line: want increasing maximal runs within the checkpoint")
		}
		if total += int(end - first + 1); total > n {
			return Manifest{}, errors.New("the seqs line lists more seqs than the events line")
		}
		m.Seqs = append(m.Seqs, SeqRun{first, end})
		last = end
	}
	if total != n {
		return Manifest{}, errors.New("the seqs line lists fewer seqs than the events line")
	}
	if m.Activation == "" && (len(m.Seqs) != 1 || m.Seqs[0] != SeqRun{m.From, m.To}) {
		return Manifest{}, errors.New("a range bundle must export exactly its range")
	}
	return m, nil
}

func parseSeq(s string) (ledger.Seq, error) {
	if s == "" || s[0] == '+' || len(s) > 1 && s[0] == '0' {
		return 0, strconv.ErrSyntax // one spelling per number
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return ledger.Seq(n), err
}

// bundleHeader is the first line of a bundle.
type bundleHeader struct {
	Format      string              `json:"format"`
	Checkpoint  string              `json:"checkpoint"`
	Manifest    string              `json:"manifest"`
	Consistency []bundleConsistency `json:"consistency,omitempty"`
}

// bundleConsistency is a consistency proof of a bundle's header: from the
// signed checkpoint Checkpoint to the bundle's.
type bundleConsistency struct {
	Checkpoint string   `json:"checkpoint"`
	Proof      []string `json:"proof"` // base64, decoded strictly
}

// decodeProof decodes base64 hashes strictly: a changed padding bit is a
// changed byte, not an alias.
func decodeProof(proof []string) ([][]byte, error) {
	hashes := make([][]byte, len(proof))
	for i, h := range proof {
		var err error
		if hashes[i], err = base64.StdEncoding.Strict().DecodeString(h); err != nil || len(hashes[i]) != 32 {
			return nil, errors.New("a proof hash is not 32 bytes in strict base64")
		}
	}
	return hashes, nil
}

func encodeProof(hashes [][]byte) []string {
	out := make([]string, len(hashes))
	for i, h := range hashes {
		out[i] = base64.StdEncoding.EncodeToString(h)
	}
	return out
}

// bundleLine is an event line of a bundle.
type bundleLine struct {
	Seq   ledger.Seq      `json:"seq"`
	Event json.RawMessage `json:"event"`
	Proof []string        `json:"proof"` // base64, decoded strictly
}

// BundleReport summarises a verified bundle.
type BundleReport struct {
	Checkpoint Checkpoint // the signed checkpoint the events are proven against
	Manifest   Manifest   // what the bundle exports
}

// BundleReader reads and verifies a bundle as a stream: NewBundleReader
// checks the header, each Next one event. Memory is bounded by the
// manifest (its runs) and one line, whatever the bundle's length. A
// BundleReader is not safe for concurrent use.
type BundleReader struct {
	br        *bufio.Reader
	cp        Checkpoint
	m         Manifest
	extends   []Checkpoint // older checkpoints the header proves cp extends
	validator *schemas.Validator
	run       int        // index into m.Seqs of the next expected seq
	want      ledger.Seq // the next expected seq (0: all read)
	prevSeq   ledger.Seq
	prevHash  events.Hash
	buf       []byte
	scratch   []byte
	err       error // sticky
}

// bundleFault builds the *Error of a bundle check.
func bundleFault(seq ledger.Seq, f Fault, detail string, cause error) *Error {
	e := fault("bundle", seq, f, detail)
	e.Cause = cause
	return e
}

// NewBundleReader reads r's header line and checks that its checkpoint
// and manifest are signed by v and that the manifest names that
// checkpoint. Failures are *Error with Op "bundle" and Fault
// FaultSignature or FaultManifest.
func NewBundleReader(r io.Reader, v note.Verifier) (*BundleReader, error) {
	b := &BundleReader{br: bufio.NewReaderSize(r, 64<<10)}
	line, err := b.readLine(MaxBundleHeader)
	if err != nil {
		return nil, bundleFault(0, FaultSignature, "header: "+err.Error(), lineCause(err))
	}
	var h bundleHeader
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(&h); err != nil || h.Format != BundleFormat {
		return nil, bundleFault(0, FaultSignature, "header: not a "+BundleFormat+" header", nil)
	}
	if len(h.Consistency) > MaxBundleConsistency {
		return nil, bundleFault(0, FaultSignature, fmt.Sprintf("header: more than MaxBundleConsistency=%d consistency proofs", MaxBundleConsistency), ErrBundleLimit)
	}
	if again, err := json.Marshal(h); err != nil || !bytes.Equal(again, line) {
		return nil, bundleFault(0, FaultSignature, "header: not the canonical encoding of a header", nil)
	}
	if b.cp, err = ParseCheckpoint([]byte(h.Checkpoint), v); err != nil {
		return nil, bundleFault(0, FaultSignature, "checkpoint: "+err.Error(), err)
	}
	n, err := openNote([]byte(h.Manifest), v)
	if err != nil {
		return nil, bundleFault(0, FaultSignature, "manifest: "+err.Error(), err)
	}
	if b.m, err = parseManifest(n.Text); err != nil {
		return nil, bundleFault(0, FaultManifest, err.Error(), lineCause(err))
	}
	if b.m.Origin != b.cp.Origin || b.m.Size != b.cp.Size || !bytes.Equal(b.m.Root, b.cp.Root) {
		return nil, bundleFault(0, FaultManifest, "the manifest names another checkpoint", nil)
	}
	for _, c := range h.Consistency {
		old, err := ParseCheckpoint([]byte(c.Checkpoint), v)
		if err != nil {
			return nil, bundleFault(0, FaultSignature, "consistency checkpoint: "+err.Error(), err)
		}
		hashes, err := decodeProof(c.Proof)
		if err == nil && c.Proof == nil {
			err = errors.New("no proof") // one spelling: an empty proof is []
		}
		if err == nil {
			err = VerifyConsistency(old, b.cp, hashes)
		}
		if err != nil {
			return nil, bundleFault(0, FaultFork, forkDetail(old.Size)+": the consistency proof does not verify", err)
		}
		b.extends = append(b.extends, old)
	}
	if b.validator, err = schemas.Default(); err != nil {
		return nil, fmt.Errorf("verify: load schemas: %w", err)
	}
	b.want = b.m.Seqs[0].First
	return b, nil
}

// lineCause is ErrBundleLimit when err is a bound being hit.
func lineCause(err error) error {
	if errors.Is(err, ErrBundleLimit) {
		return ErrBundleLimit
	}
	return nil
}

func forkDetail(size ledger.Seq) string {
	return fmt.Sprintf("the bundle's history is not an extension of the checkpoint of size %d: fork", size)
}

// Extends checks that the bundle's checkpoint extends old, a checkpoint
// the caller trusts (kept from an earlier 'checkpoint', or a witness's
// state): the same checkpoint, or one the header carries a verified
// consistency proof from (bundle --consistent-with). Without it a bundle
// only proves what its own signed checkpoint says. The failure is an
// *Error with Op "bundle" and Fault FaultFork.
func (b *BundleReader) Extends(old Checkpoint) error {
	if old.Size >= b.cp.Size {
		if err := VerifyConsistency(old, b.cp, nil); err != nil {
			return bundleFault(0, FaultFork, forkDetail(old.Size), err)
		}
		return nil
	}
	for _, c := range b.extends {
		if c.Origin == old.Origin && c.Size == old.Size && bytes.Equal(c.Root, old.Root) && c.Head == old.Head {
			return nil // verified in NewBundleReader
		}
	}
	for _, c := range b.extends {
		if c.Origin == old.Origin && c.Size == old.Size {
			// Two checkpoints of one size, both signed, both extended?
			// Only one can be the trusted one.
			return bundleFault(0, FaultFork, forkDetail(old.Size)+": the bundle extends another checkpoint of that size", nil)
		}
	}
	return bundleFault(0, FaultFork, forkDetail(old.Size)+" (or not proven: the bundle carries no consistency proof from it; export it with bundle --consistent-with)", nil)
}

// Checkpoint is the bundle's verified checkpoint.
func (b *BundleReader) Checkpoint() Checkpoint { return b.cp }

// Manifest is the bundle's verified manifest.
func (b *BundleReader) Manifest() Manifest { return b.m }

// errNoNewline: the bundle ends in the middle of a line.
var errNoNewline = errors.New("the last line lacks its newline")

// readLine returns the next line without its newline, at most limit
// bytes, valid until the next call.
func (b *BundleReader) readLine(limit int) ([]byte, error) {
	b.buf = b.buf[:0]
	for {
		frag, err := b.br.ReadSlice('\n')
		if len(b.buf)+len(frag) > limit+1 {
			return nil, fmt.Errorf("%w: a line exceeds %d bytes", ErrBundleLimit, limit)
		}
		b.buf = append(b.buf, frag...)
		switch {
		case err == nil:
			return b.buf[:len(b.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF) && len(b.buf) > 0:
			return nil, errNoNewline
		default:
			return nil, err
		}
	}
}

// Next reads and verifies the next event line and returns its seq and
// canonical bytes (a fresh slice). After the last event it checks that
// nothing follows and returns io.EOF: only then has the whole bundle been
// verified. Every failure is an *Error with Op "bundle" naming the seq;
// errors are sticky.
func (b *BundleReader) Next() (ledger.Seq, []byte, error) {
	if b.err != nil {
		return 0, nil, b.err
	}
	seq, raw, err := b.next()
	if err != nil {
		b.err = err
	}
	return seq, raw, err
}

func (b *BundleReader) next() (ledger.Seq, []byte, error) {
	line, err := b.readLine(MaxBundleLine)
	if errors.Is(err, io.EOF) {
		if b.want != 0 {
			return 0, nil, bundleFault(b.want, FaultMissing, "the bundle ends before this listed seq", nil)
		}
		return 0, nil, io.EOF
	}
	at := b.want
	if at == 0 {
		at = b.prevSeq + 1
	}
	if err != nil {
		if !errors.Is(err, ErrBundleLimit) && !errors.Is(err, errNoNewline) {
			return 0, nil, fmt.Errorf("verify: read the bundle: %w", err)
		}
		return 0, nil, bundleFault(at, FaultLine, err.Error(), lineCause(err))
	}
	var l bundleLine
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(&l); err != nil || d.More() || l.Seq == 0 || len(l.Event) == 0 {
		return 0, nil, bundleFault(at, FaultLine, "not an event line", nil)
	}
	hashes, err := decodeProof(l.Proof)
	if err != nil {
		return 0, nil, bundleFault(at, FaultProof, err.Error(), nil)
	}
	// Exactly the line the exporter writes: one spelling per bundle.
	if !bytes.Equal(appendBundleLine(b.scratch[:0], l.Seq, l.Event, hashes), append(line, '\n')) {
		return 0, nil, bundleFault(at, FaultLine, "not the canonical encoding of an event line", nil)
	}
	switch {
	case b.want == 0:
		return 0, nil, bundleFault(l.Seq, FaultUnexpected, "a line past the last seq the manifest lists", nil)
	case l.Seq < b.want:
		// Named by the seq whose place the line takes: that finds it.
		return 0, nil, bundleFault(b.want, FaultUnexpected, fmt.Sprintf("the line in this seq's place carries seq %d (duplicated or out of order)", l.Seq), nil)
	case l.Seq > b.want:
		return 0, nil, bundleFault(b.want, FaultMissing, fmt.Sprintf("the manifest lists this seq, the next line is seq %d", l.Seq), nil)
	}
	seq := l.Seq
	env, err := events.Decode(l.Event)
	if err != nil {
		return 0, nil, bundleFault(seq, FaultUndecodable, err.Error(), nil)
	}
	if env.Seq != seq {
		return 0, nil, bundleFault(seq, FaultSeqMismatch, fmt.Sprintf("envelope says seq %d", env.Seq), nil)
	}
	if !env.CheckHash() {
		return 0, nil, bundleFault(seq, FaultBadHash, "", nil)
	}
	if (seq == 1 || seq == b.prevSeq+1) && env.Prev != b.prevHash {
		return 0, nil, bundleFault(seq, FaultBrokenLink, "prev is not the hash of seq "+fmt.Sprint(seq-1), nil)
	}
	if err := b.validator.ValidateEnvelope(l.Event); err != nil {
		return 0, nil, bundleFault(seq, FaultSchemaInvalid, err.Error(), nil)
	}
	if b.m.Activation != "" && env.Activation != b.m.Activation {
		return 0, nil, bundleFault(seq, FaultActivation, "the event is not of the bundle's activation", nil)
	}
	if err := VerifyInclusion(b.cp, seq, l.Event, hashes); err != nil {
		return 0, nil, bundleFault(seq, FaultProof, "the inclusion proof does not lead to the checkpoint's root", err)
	}
	if seq == b.cp.Size && env.Hash != b.cp.Head {
		return 0, nil, bundleFault(seq, FaultCheckpoint, "the hash differs from the checkpoint's chain hash", nil)
	}
	b.prevSeq, b.prevHash = seq, env.Hash
	b.advance()
	return seq, l.Event, nil
}

// advance moves want to the seq after the current one in the manifest.
func (b *BundleReader) advance() {
	if b.want < b.m.Seqs[b.run].Last {
		b.want++
		return
	}
	if b.run++; b.run < len(b.m.Seqs) {
		b.want = b.m.Seqs[b.run].First
		return
	}
	b.want = 0
}

// Bundle verifies a whole bundle read from r with the verifier key v: the
// checkpoint's and manifest's signatures, then every event line (canonical,
// under its listed seq, hashed, linked to its predecessor within each run
// of consecutive seqs, valid against its JSON Schema, of the bundle's
// activation, and proven included in the checkpoint), and that the lines
// are exactly the manifest's seqs. The first failure is an *Error with Op
// "bundle" naming the seq.
func Bundle(r io.Reader, v note.Verifier) (BundleReport, error) {
	br, err := NewBundleReader(r, v)
	if err != nil {
		return BundleReport{}, err
	}
	for {
		if _, _, err := br.Next(); errors.Is(err, io.EOF) {
			return BundleReport{Checkpoint: br.cp, Manifest: br.m}, nil
		} else if err != nil {
			return BundleReport{}, err
		}
	}
}
