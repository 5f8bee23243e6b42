package runtime

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The memoised fingerprint equals ServerConfig.Fingerprint for every entry,
// including entries whose maps and slices the source changed in place
// after an earlier lookup (the memo keeps its own copy), and across a
// memo emptied at its bound.
func TestFingerprintMemoEqualsFingerprint(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	var memo fingerprintMemo
	rng := rand.New(rand.NewPCG(7, 8))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	// A few live entries the source mutates in place, as a config source
	// that reuses its maps and slices would.
	live := make([]ServerConfig, 5)
	for i := range live {
		live[i] = ServerConfig{Command: "node", Args: []string{"a"}, Env: map[string]string{"K": "v"},
			Headers: map[string]string{}, AllowRedirectOrigins: []string{}, name: "s" + strconv.Itoa(i)}
	}
	for i := 0; i < 20000; i++ {
		c := &live[rng.IntN(len(live))]
		switch rng.IntN(12) {
		case 0:
			c.Command = pick("node", "python", "")
		case 1:
			if len(c.Args) > 0 {
				c.Args[0] = pick("a", "b") // in place: same backing array
			}
		case 2:
			c.Args = append(c.Args, pick("x", "y"))
		case 3:
			c.Env["K"] = pick("v", "w") // in place: same map
		case 4:
			delete(c.Env, "K")
		case 5:
			c.Cwd = pick("", "/tmp")
		case 6:
			c.Shared = !c.Shared
		case 7:
			c.OneShot = !c.OneShot
		case 8:
			c.URL = pick("", "https://example.test/mcp")
			c.Headers["Authorization"] = pick("a", "b")
		case 9:
			if len(c.AllowRedirectOrigins) > 0 {
				c.AllowRedirectOrigins[0] = pick("https://a.test", "https://b.test")
			} else {
				c.AllowRedirectOrigins = append(c.AllowRedirectOrigins, "https://a.test")
			}
		case 10:
			c.Type = pick("", "stdio", "http")
		case 11:
			// Many names: the memo passes its bound and is emptied.
			n := *c
			n.name = "many-" + strconv.Itoa(rng.IntN(3*maxFingerprintMemo))
			if got, want := memo.get(n, key), n.Fingerprint(key); got != want {
				t.Fatalf("step %d: memo %s, Fingerprint %s", i, got, want)
			}
			continue
		}
		if got, want := memo.get(*c, key), c.Fingerprint(key); got != want {
			t.Fatalf("step %d: memo %s, Fingerprint %s for %+v", i, got, want, *c)
		}
	}
	if len(memo.byName) > maxFingerprintMemo {
		t.Fatalf("memo holds %d entries, bound %d", len(memo.byName), maxFingerprintMemo)
	}
}

// Concurrent lookups (calls of many sessions) each get exactly
// Fingerprint's answer, for names hit, changed and beyond the bound; run
// with -race. Every reset at the bound is counted.
func TestFingerprintMemoConcurrent(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	var memo fingerprintMemo
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for i := 0; i < 3000; i++ {
				// Each goroutine owns its entries, as each call owns the
				// entry its config source returned.
				c := ServerConfig{Command: "node", Args: []string{strconv.Itoa(rng.IntN(3))},
					name: "s" + strconv.Itoa(rng.IntN(2*maxFingerprintMemo))}
				if got, want := memo.get(c, key), c.Fingerprint(key); got != want {
					errs <- "memo " + got + ", Fingerprint " + want + " for " + c.name
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if memo.resetCount() == 0 {
		t.Fatal("2048 names through a memo of 1024: no reset counted")
	}
}

// The memo is emptied only when a new name meets a full memo, and each
// such reset is counted; a changed entry of a known name replaces its own.
func TestFingerprintMemoCountsResets(t *testing.T) {
	key := []byte("k")
	var memo fingerprintMemo
	for i := range maxFingerprintMemo {
		memo.get(ServerConfig{Command: "a", name: strconv.Itoa(i)}, key)
	}
	memo.get(ServerConfig{Command: "changed", name: "0"}, key)
	if n := memo.resetCount(); n != 0 {
		t.Fatalf("%d resets at the bound before a new name", n)
	}
	memo.get(ServerConfig{Command: "a", name: "new"}, key)
	if n, l := memo.resetCount(), len(memo.byName); n != 1 || l != 1 {
		t.Fatalf("%d resets, %d entries after a new name at the bound", n, l)
	}
}

// A hit is exact for the key asked: a memo filled under one key answers
// another key with that key's fingerprint.
func TestFingerprintMemoUsesItsKey(t *testing.T) {
	var memo fingerprintMemo
	c := ServerConfig{Command: "node", name: "s"}
	memo.get(c, []byte("key one"))
	if got, want := memo.get(c, []byte("key two")), c.Fingerprint([]byte("key two")); got != want {
		t.Fatalf("memo %s under key two, Fingerprint %s", got, want)
	}
}

// equal and clone handle every field of ServerConfig: changing any one
// field makes the entries unequal, and a clone shares no map or slice. A
// field of a new kind (a pointer, say) fails here until they handle it.
func TestServerConfigEqualCoversFields(t *testing.T) {
	prefix := func() *string { p := "p_"; return &p }
	base := ServerConfig{Command: "c", Args: []string{"a"}, Env: map[string]string{"K": "v"}, Cwd: "d",
		URL: "u", Headers: map[string]string{"H": "v"}, AllowRedirectOrigins: []string{"o"}, Type: "t", Prefix: prefix(), name: "n"}
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		f := typ.Field(i)
		c := base.clone()
		v := reflect.ValueOf(&c).Elem().Field(i)
		v = reflect.NewAt(v.Type(), v.Addr().UnsafePointer()).Elem() // unexported fields too
		switch f.Type.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Int64:
			v.SetInt(v.Int() + 1)
		case reflect.Slice:
			if f.Type.Elem().Kind() != reflect.String {
				t.Fatalf("field %s: slice of %s not handled", f.Name, f.Type.Elem())
			}
			v.Index(0).SetString("changed") // in place: the clone's own array
		case reflect.Map:
			if f.Type.Key().Kind() != reflect.String || f.Type.Elem().Kind() != reflect.String {
				t.Fatalf("field %s: %s not handled", f.Name, f.Type)
			}
			v.SetMapIndex(reflect.ValueOf("K2"), reflect.ValueOf("v2")) // in place: the clone's own map
		case reflect.Pointer:
			if f.Type.Elem().Kind() != reflect.String {
				t.Fatalf("field %s: pointer to %s not handled", f.Name, f.Type.Elem())
			}
			v.Elem().SetString(v.Elem().String() + "x") // in place: the clone's own string
		default:
			t.Fatalf("field %s of kind %s: equal and clone do not handle it", f.Name, f.Type.Kind())
		}
		if c.equal(base) {
			t.Errorf("field %s: changed, still equal", f.Name)
		}
		if !base.equal(ServerConfig{Command: "c", Args: []string{"a"}, Env: map[string]string{"K": "v"}, Cwd: "d",
			URL: "u", Headers: map[string]string{"H": "v"}, AllowRedirectOrigins: []string{"o"}, Type: "t", Prefix: prefix(), name: "n"}) {
			t.Fatalf("field %s: changing the clone changed the original", f.Name)
		}
	}
}

// BenchmarkFingerprintMemo compares, in one run, what each call paid for
// its entry's fingerprint before the memo (ServerConfig.Fingerprint: the
// canonical JSON and the HMAC) with a memo hit (a field-by-field
// comparison with the memoised copy), on a stdio entry like a host's.
//
//	go test -run '^$' -bench FingerprintMemo ./runtime/
func BenchmarkFingerprintMemo(b *testing.B) {
	key := make([]byte, FingerprintKeyBytes)
	cfg := ServerConfig{Command: "node", Args: []string{"/opt/servers/everything/dist/index.js", "stdio"},
		Env: map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/home/u", "TOKEN": "secret"}, name: "everything"}
	var memo fingerprintMemo
	memo.get(cfg, key)
	const chunk = 1000
	var tRef, tMemo time.Duration
	for done := 0; done < b.N; done += chunk {
		n := min(chunk, b.N-done)
		t0 := time.Now()
		for range n {
			_ = cfg.Fingerprint(key)
		}
		t1 := time.Now()
		for range n {
			_ = memo.get(cfg, key)
		}
		tRef += t1.Sub(t0)
		tMemo += time.Since(t1)
	}
	b.ReportMetric(float64(tRef.Nanoseconds())/float64(b.N), "fingerprint-ns")
	b.ReportMetric(float64(tMemo.Nanoseconds())/float64(b.N), "memo-hit-ns")
	b.ReportMetric(float64(tMemo)/float64(tRef), "ratio")
	b.ReportMetric(0, "ns/op")
}
