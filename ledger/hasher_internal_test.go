package ledger

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/transparency-dev/merkle/rfc6962"
)

// TestCommitterHasherTwin: the committer's hasher gives the hashes of
// rfc6962.DefaultHasher, each returned hash stays what it was while many
// more are cut from the same and later slabs, and appending to one never
// writes into another.
func TestCommitterHasherTwin(t *testing.T) {
	_, c, err := newCommitterRange(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	type kept struct{ got, want []byte }
	var all []kept
	for i := range 3*hashSlabLen + 5 {
		leaf := []byte(fmt.Sprintf("event %d", i))
		got, want := c.leaf(leaf), rfc6962.DefaultHasher.HashLeaf(leaf)
		all = append(all, kept{got, want})
		l, r := all[len(all)-1].got, all[len(all)/2].got
		got, want = c.children(l, r), rfc6962.DefaultHasher.HashChildren(l, r)
		all = append(all, kept{got, want})
		if cap(got) != sha256.Size {
			t.Fatalf("hash of capacity %d, want %d", cap(got), sha256.Size)
		}
		_ = append(got, 0xff) // must copy, not write into the next slot
	}
	for i, k := range all {
		if !bytes.Equal(k.got, k.want) {
			t.Fatalf("hash %d: %x, want %x", i, k.got, k.want)
		}
	}
}

// TestCommitterHasherAllocs: hashing allocates one slab per hashSlabLen
// hashes, not one slice per hash.
func TestCommitterHasherAllocs(t *testing.T) {
	_, c, err := newCommitterRange(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf := []byte("event")
	h := c.leaf(leaf)
	if a := testing.AllocsPerRun(10*hashSlabLen, func() { c.children(c.leaf(leaf), h) }); a > 4.0/hashSlabLen {
		t.Fatalf("%.3f allocations per two hashes, want at most %.3f", a, 4.0/hashSlabLen)
	}
}
