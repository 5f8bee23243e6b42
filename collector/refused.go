package collector

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// RefusedFile is the name, inside a host's mirror directory, of the
// persisted finding that refuses the host. Its presence alone keeps the
// host refused; an operator removes it to let mirroring resume.
const RefusedFile = "REFUSED.json"

// MaxFindingBytes bounds a REFUSED.json the collector reads back: a larger
// file is not a finding it wrote, and refusing to start says so.
const MaxFindingBytes = 64 << 10

// Reasons a host is refused.
const (
	// ReasonForked: an event the host offers at a mirrored seq differs from
	// the mirrored one, or does not chain onto the mirror's head, or the
	// host's head hash differs from the mirror's at that seq — the host
	// rewrote (re-sealed) its history.
	ReasonForked = "forked"
	// ReasonChainBroken: an event does not verify on its own (its hash does
	// not recompute, it is malformed, or its seq is not the next one).
	ReasonChainBroken = "chain-broken"
	// ReasonCheckpoint: a checkpoint the host signed (Options.Verifiers)
	// names another Merkle root or chain hash at its size than the mirror
	// holds: the host signed a history other than the one it served.
	ReasonCheckpoint = "checkpoint-mismatch"
	// ReasonHostMismatch: a host.bound event of the host's chain names
	// another host.
	ReasonHostMismatch = "host-mismatch"
	// ReasonUnreadableFinding: the RefusedFile read back is not a finding
	// (damaged or edited); it still refuses the host.
	ReasonUnreadableFinding = "unreadable-finding"
)

// Finding is why a host was refused, as persisted in RefusedFile.
type Finding struct {
	Host string     `json:"host"`
	Seq  events.Seq `json:"seq"`
	// Stored and Offered are the mirror's and the host's hash at Seq (hex),
	// when the refusal compares two (a fork).
	Stored  string    `json:"stored_hash,omitempty"`
	Offered string    `json:"offered_hash,omitempty"`
	Reason  string    `json:"reason"`
	Detail  string    `json:"detail"`
	Time    time.Time `json:"time"`
}

// ErrRefused is the error of a refused host's mirroring (HostStatus
// carries its Finding).
var ErrRefused = errors.New("collector: host refused")

// ErrFindingTooLarge: a RefusedFile larger than MaxFindingBytes, which the
// collector did not write.
var ErrFindingTooLarge = errors.New("collector: finding too large")

// ErrFindingNotRegular: a RefusedFile that is not a regular file (a FIFO,
// a device, a directory, or a symlink to one), which the collector did not
// write; reading it could block or never end.
var ErrFindingNotRegular = errors.New("collector: finding is not a regular file")

// ReadFinding returns the finding persisted in a host's mirror directory
// (HostDir), nil when there is none. A file that does not parse is a
// finding of ReasonUnreadableFinding (its presence alone refuses); one
// larger than MaxFindingBytes is ErrFindingTooLarge (TestReadFinding); one
// that is not a regular file (a FIFO, or a symlink to a device) is
// ErrFindingNotRegular at once, never a blocked or endless read
// (TestReadFindingFIFO, TestReadFindingDevice).
func ReadFinding(dir string) (*Finding, error) {
	p := filepath.Join(dir, RefusedFile)
	// O_NONBLOCK: opening a FIFO must not wait for a writer; on a regular
	// file it changes nothing.
	fh, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is %v: remove it", ErrFindingNotRegular, p, st.Mode().Type())
	}
	if st.Size() > MaxFindingBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than MaxFindingBytes=%d: remove or fix it", ErrFindingTooLarge, p, st.Size(), MaxFindingBytes)
	}
	// Bounded even if the file grows after the Stat.
	b, err := io.ReadAll(io.LimitReader(fh, MaxFindingBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFindingBytes {
		return nil, fmt.Errorf("%w: %s grew past MaxFindingBytes=%d while read: remove or fix it", ErrFindingTooLarge, p, MaxFindingBytes)
	}
	var f Finding
	if err := json.Unmarshal(b, &f); err != nil {
		// A damaged finding still refuses: the file's presence is the
		// operator's switch, its content only explains.
		return &Finding{Reason: ReasonUnreadableFinding, Detail: fmt.Sprintf("%s: %v", p, err)}, nil
	}
	return &f, nil
}

// writeFinding persists f in dir durably: written to a temporary file,
// synced, renamed over RefusedFile and the directory synced, so a crash
// leaves either no finding or the whole one.
func writeFinding(dir string, f *Finding) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	tmp, err := os.CreateTemp(dir, RefusedFile+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, RefusedFile))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
