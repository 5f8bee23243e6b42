//go:build linux

package helper

import (
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	cases := []struct {
		in    string
		ppid  int
		state byte
		ok    bool
	}{
		{"123 (sleep) S 45 123 45 0 -1", 45, 'S', true},
		{"123 (we ird) (x) ) Z 7 1 1", 7, 'Z', true}, // comm may hold spaces and ')'
		{"123 (sleep)", 0, 0, false},
		{"garbage", 0, 0, false},
		{"1 (a) SS 2", 0, 0, false},
		{"1 (a) S x", 0, 0, false},
	}
	for _, c := range cases {
		ppid, state, ok := parseStat([]byte(c.in))
		if ppid != c.ppid || state != c.state || ok != c.ok {
			t.Errorf("parseStat(%q) = %d %q %v", c.in, ppid, state, ok)
		}
	}
}

func TestProcStatSelf(t *testing.T) {
	ppid, state, ok := procStat(os.Getpid())
	if !ok || ppid != os.Getppid() || state != 'R' && state != 'S' {
		t.Fatalf("procStat(self) = %d %q %v", ppid, state, ok)
	}
}
