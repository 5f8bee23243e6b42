package gateway

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/leaseledger/leaseledger/events"
)

// Token bounds and format.
const (
	// MaxTokenFileBytes bounds the token file; a larger file is refused
	// (ErrTokenFile) rather than read into memory.
	MaxTokenFileBytes = 1 << 20
	// MaxTokens bounds the tokens of one file.
	MaxTokens = 4096
	// MaxBearerBytes bounds the bearer token a request presents; a longer
	// one is refused (401) without hashing it.
	MaxBearerBytes = 512
	// TokenPrefix starts every token NewToken makes, so a leaked one is
	// recognizable.
	TokenPrefix = "llt_"
	// tokenRandomBytes is the entropy of a token.
	tokenRandomBytes = 32
	// HashPrefix starts every stored hash: sha256:<64 lowercase hex>.
	HashPrefix = "sha256:"
	// tokenFileForbiddenPerm: permission bits a token file must not have
	// (written by group or others; ErrTokenFilePerm).
	tokenFileForbiddenPerm = 0o022
)

// Tokens is the set of bearer tokens the gateway accepts, read from a file
// that stores only their hashes. Each line is `<name> <hash>`: name follows
// events.IDRule and is the principal recorded for the sessions the token
// opens; hash is HashToken of the token. Blank lines and lines starting
// with '#' are ignored. Names and hashes are unique within a file. It is
// safe for concurrent use.
type Tokens struct {
	path string

	mu     sync.Mutex
	byHash map[string]string // hash → name
	subs   map[int]func()
	nextID int
}

// LoadTokens reads the token file at path. A file writable by its group
// or by others is refused (ErrTokenFilePerm), as is a malformed one
// (ErrTokenFile); Reload checks the same.
func LoadTokens(path string) (*Tokens, error) {
	set, err := readTokens(path)
	if err != nil {
		err.Op = "load_tokens"
		return nil, err
	}
	return &Tokens{path: path, byHash: set, subs: map[int]func(){}}, nil
}

// Reload re-reads the file. On success the new set replaces the old one at
// once: a removed (or re-hashed) token is refused with 401 from then on,
// and every gateway using t ends the sessions it opened. When the file
// cannot be read or is malformed the old set stays in force and the error
// says why (ErrTokenFile).
func (t *Tokens) Reload() error {
	set, err := readTokens(t.path)
	if err != nil {
		err.Op = "reload_tokens"
		return err
	}
	t.mu.Lock()
	t.byHash = set
	subs := make([]func(), 0, len(t.subs))
	for _, f := range t.subs {
		subs = append(subs, f)
	}
	t.mu.Unlock()
	for _, f := range subs {
		f()
	}
	return nil
}

// Len returns how many tokens are in force.
func (t *Tokens) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byHash)
}

// verify returns the name and hash of a presented token, and whether it
// is in force.
func (t *Tokens) verify(plain string) (name, hash string, ok bool) {
	if plain == "" || len(plain) > MaxBearerBytes {
		return "", "", false
	}
	hash = HashToken(plain)
	t.mu.Lock()
	name, ok = t.byHash[hash]
	t.mu.Unlock()
	return name, hash, ok
}

// holds reports whether the token with hash is still in force.
func (t *Tokens) holds(hash string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.byHash[hash]
	return ok
}

// subscribe runs f after every successful Reload until the returned
// function is called.
func (t *Tokens) subscribe(f func()) (cancel func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := t.nextID
	t.nextID++
	t.subs[id] = f
	return func() {
		t.mu.Lock()
		delete(t.subs, id)
		t.mu.Unlock()
	}
}

// NewToken returns a fresh random token: TokenPrefix and 32 random bytes
// as hex. Only its hash (HashToken) is stored.
func NewToken() (plain string, err error) {
	var b [tokenRandomBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return TokenPrefix + hex.EncodeToString(b[:]), nil
}

// HashToken returns the form of plain stored in the token file:
// HashPrefix and the lowercase hex SHA-256 of its bytes.
func HashToken(plain string) string {
	sum := sha256.Sum256([]byte(plain))
	return HashPrefix + hex.EncodeToString(sum[:])
}

// TokenLine returns the token file line for a token named name with hash.
func TokenLine(name, hash string) string { return name + " " + hash }

// TokenLineFields splits one token file line into its fields as
// LoadTokens reads them — separated by any run of spaces or tabs — and
// returns nil for a blank line or a '#' comment. A well-formed token line
// has two: the name and the hash. Tools that edit the file use it so that
// they read each line as the gateway does.
func TokenLineFields(line string) []string {
	s := strings.TrimSpace(line)
	if s == "" || strings.HasPrefix(s, "#") {
		return nil
	}
	return strings.Fields(s)
}

// ValidTokenName reports whether name may name a token (events.IDRule).
func ValidTokenName(name string) bool { return events.ValidID(name) }

func validHash(h string) bool {
	x, ok := strings.CutPrefix(h, HashPrefix)
	if !ok || len(x) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(x); i++ {
		if c := x[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// readTokens reads and parses a token file.
func readTokens(path string) (map[string]string, *Error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{Err: ErrTokenFile, cause: err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &Error{Err: ErrTokenFile, cause: err}
	}
	if st.Mode().Perm()&tokenFileForbiddenPerm != 0 {
		return nil, &Error{Err: ErrTokenFilePerm}
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxTokenFileBytes+1))
	if err != nil {
		return nil, &Error{Err: ErrTokenFile, cause: err}
	}
	if len(b) > MaxTokenFileBytes {
		return nil, &Error{Err: ErrTokenFile}
	}
	return parseTokens(b)
}

// parseTokens parses token file content; the error names the first bad
// line, never its text.
func parseTokens(b []byte) (map[string]string, *Error) {
	set := map[string]string{}
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), MaxTokenFileBytes)
	for line := 1; sc.Scan(); line++ {
		f := TokenLineFields(sc.Text())
		if f == nil {
			continue
		}
		bad := len(f) != 2 || !ValidTokenName(f[0]) || !validHash(f[1]) || names[f[0]] || set[f[1]] != ""
		if bad || len(set) >= MaxTokens {
			return nil, &Error{Err: ErrTokenFile, Line: line}
		}
		names[f[0]] = true
		set[f[1]] = f[0]
	}
	if err := sc.Err(); err != nil {
		return nil, &Error{Err: ErrTokenFile}
	}
	return set, nil
}
