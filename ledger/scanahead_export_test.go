package ledger

import "context"

// AheadStats is what one read-ahead's reader allocated.
type AheadStats struct {
	Chunks    int // chunks made
	MaxBufCap int // the largest capacity of a chunk's buffer handed over
	BigCopies int // events copied into the oversize buffer
}

// ScanAheadSized is ScanAhead with the given bounds; report, if not nil,
// is called by the reader as it ends (before ScanAheadSized returns).
func (l *Ledger) ScanAheadSized(ctx context.Context, q Query, fn func(Seq, []byte) error, chunkBytes, chunks, chunkEvents int, report func(AheadStats)) error {
	cfg := aheadConfig{chunkBytes: chunkBytes, chunks: chunks, chunkEvents: chunkEvents}
	if report != nil {
		cfg.report = func(s aheadStats) {
			report(AheadStats{Chunks: s.chunks, MaxBufCap: s.maxBufCap, BigCopies: s.bigCopies})
		}
	}
	return l.scanAhead(ctx, q, fn, cfg)
}
