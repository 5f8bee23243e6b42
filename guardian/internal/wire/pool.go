package wire

import "sync"

// chunkPool recycles data-chunk buffers (cap MaxDataChunk) between a frame
// reader and the consumer of its data, so a busy relay does not allocate,
// and collect, 64 KiB per frame.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, 0, MaxDataChunk); return &b }}

// GetChunk returns a copy of p in a pooled buffer when p fits in one, else
// a fresh copy. Release it with PutChunk when done.
func GetChunk(p []byte) *[]byte {
	if len(p) > MaxDataChunk {
		b := append([]byte(nil), p...)
		return &b
	}
	b := chunkPool.Get().(*[]byte)
	*b = append((*b)[:0], p...)
	return b
}

// newChunk returns a pooled buffer of length n ≤ MaxDataChunk, for a reader
// that fills it in place.
func newChunk(n int) *[]byte {
	b := chunkPool.Get().(*[]byte)
	*b = (*b)[:n]
	return b
}

// PutChunk recycles a buffer from GetChunk (or Frame.TakeChunk). Buffers
// of another capacity are left to the collector.
func PutChunk(b *[]byte) {
	if cap(*b) == MaxDataChunk {
		chunkPool.Put(b)
	}
}
