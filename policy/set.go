package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"iter"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"

	"github.com/leaseledger/leaseledger/events"
)

// File bounds. A policy set is read whole into memory and parsed at load
// and at every reload, so its files are bounded; a larger one is refused
// (ErrTooLarge) rather than read.
const (
	// MaxPolicyFileBytes bounds the policy file.
	MaxPolicyFileBytes = 1 << 20
	// MaxEntitiesFileBytes bounds the entities file.
	MaxEntitiesFileBytes = 1 << 20
)

// DigestDomain starts the digested bytes (see Set.Digest), so that a
// digest of a policy set is never the digest of anything else, and a
// future encoding can change the version.
const DigestDomain = "leaseledger-policy-v1"

// idAnnotation is the annotation that names a policy.
const idAnnotation = "id"

// Set is a parsed, validated policy set with its entities: immutable, and
// safe for concurrent use. The zero value is not usable; build one with
// Parse or Load. A nil *Set allows everything (see Decide): it is the
// policy of a host that runs without a policy file.
type Set struct {
	policies  orderedPolicies
	ids       []string
	entities  types.EntityMap
	digest    string
	readsTime bool
}

// namedPolicy is one policy with its id.
type namedPolicy struct {
	id cedar.PolicyID
	p  *cedar.Policy
}

// orderedPolicies is a cedar.PolicyIterator that yields the policies in
// file order, so that the deciding policies of a decision come in that
// order (cedar.PolicySet is a map: its order would change from one
// decision to the next).
type orderedPolicies []namedPolicy

// All implements cedar.PolicyIterator.
func (o orderedPolicies) All() iter.Seq2[cedar.PolicyID, *cedar.Policy] {
	return func(yield func(cedar.PolicyID, *cedar.Policy) bool) {
		for _, n := range o {
			if !yield(n.id, n.p) {
				return
			}
		}
	}
}

// Load reads the policy file at policyPath and, unless entitiesPath is "",
// the entities file there, and parses them with Parse (the paths name the
// files in errors). A file larger than its bound is refused (ErrTooLarge)
// without being read whole; a file that cannot be read is ErrRead.
func Load(policyPath, entitiesPath string) (*Set, error) {
	pol, err := readBounded(policyPath, MaxPolicyFileBytes)
	if err != nil {
		return nil, err
	}
	var ent []byte
	if entitiesPath != "" {
		if ent, err = readBounded(entitiesPath, MaxEntitiesFileBytes); err != nil {
			return nil, err
		}
	}
	return Parse(policyPath, pol, entitiesPath, ent)
}

// readBounded reads at most limit bytes of path; more is ErrTooLarge.
func readBounded(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{File: path, Err: ErrRead, cause: err}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, &Error{File: path, Err: ErrRead, cause: err}
	}
	if len(b) > limit {
		return nil, &Error{File: path, Err: ErrTooLarge, cause: errors.New("more than " + strconv.Itoa(limit) + " bytes")}
	}
	return b, nil
}

// Parse parses policyText (Cedar) and entitiesJSON (Cedar's JSON entities
// format; nil or blank: no entities) into a Set. policyName and
// entitiesName name them in errors.
//
// Each policy's id is its @id("…") annotation, which must follow
// events.IDRule (ErrInvalidID), or else "policy<N>", N its 0-based
// position in the file; ids are unique (ErrDuplicateID). Every policy is
// validated against Schema in Cedar's strict mode (ErrSchema), every
// entity too (ErrEntities); the entities file holds only Principal and
// Group entities — their group memberships — since servers, tools,
// prompts and resources are built from each request. The first error is
// returned, as an *Error naming the file, line, column and policy.
func Parse(policyName string, policyText []byte, entitiesName string, entitiesJSON []byte) (*Set, error) {
	if len(policyText) > MaxPolicyFileBytes {
		return nil, &Error{File: policyName, Err: ErrTooLarge, cause: errors.New("more than " + strconv.Itoa(MaxPolicyFileBytes) + " bytes")}
	}
	if len(entitiesJSON) > MaxEntitiesFileBytes {
		return nil, &Error{File: entitiesName, Err: ErrTooLarge, cause: errors.New("more than " + strconv.Itoa(MaxEntitiesFileBytes) + " bytes")}
	}
	v, err := newValidator()
	if err != nil {
		return nil, err
	}
	list, err := cedar.NewPolicyListFromBytes(policyName, policyText)
	if err != nil {
		return nil, syntaxError(policyName, err)
	}
	if len(list) > events.MaxPolicies {
		return nil, &Error{File: policyName, Err: ErrTooLarge, cause: errors.New("more than events.MaxPolicies=" + strconv.Itoa(events.MaxPolicies) + " policies")}
	}
	s := &Set{policies: make(orderedPolicies, 0, len(list)), ids: make([]string, 0, len(list))}
	seen := make(map[string]bool, len(list))
	for i, p := range list {
		pos := p.Position()
		at := func(kind error, id string, cause error) *Error {
			return &Error{File: policyName, Line: pos.Line, Column: pos.Column, Policy: id, Err: kind, cause: cause}
		}
		id := "policy" + strconv.Itoa(i)
		if a, ok := p.Annotations()[idAnnotation]; ok {
			if !events.ValidID(string(a)) {
				// The id is not named: it is not a valid one.
				return nil, at(ErrInvalidID, "", nil)
			}
			id = string(a)
		}
		if seen[id] {
			return nil, at(ErrDuplicateID, id, nil)
		}
		seen[id] = true
		x := (*xast.Policy)(p.AST())
		// "" leaves out the validator's own "for policy `…`" prefix: the
		// Error names the policy.
		if err := v.Policy("", x); err != nil {
			return nil, at(ErrSchema, id, joinLines(err))
		}
		s.policies = append(s.policies, namedPolicy{id: cedar.PolicyID(id), p: p})
		s.ids = append(s.ids, id)
		s.readsTime = s.readsTime || readsTime(x)
	}
	if s.entities, err = parseEntities(entitiesName, entitiesJSON, v); err != nil {
		return nil, err
	}
	s.digest = Digest(policyText, entitiesJSON)
	return s, nil
}

// Digest returns the digest of a policy file's and an entities file's
// bytes (nil: no entities file), as Set.Digest defines it. It does not
// parse them.
func Digest(policyText, entitiesJSON []byte) string {
	h := sha256.New()
	io.WriteString(h, DigestDomain+"\n"+strconv.Itoa(len(policyText))+"\n")
	h.Write(policyText)
	io.WriteString(h, strconv.Itoa(len(entitiesJSON))+"\n")
	h.Write(entitiesJSON)
	return hex.EncodeToString(h.Sum(nil))
}

// Digest returns the digest of the set: 64 lowercase hex digits of the
// SHA-256 of
//
//	"leaseledger-policy-v1\n" <P> "\n" <policy file bytes> <E> "\n" <entities file bytes>
//
// where <P> and <E> are the files' lengths in bytes in decimal ASCII (an
// absent entities file is empty: E = 0). The lengths make the encoding
// unambiguous: no other pair of files has the same digested bytes. It is
// the digest policy.loaded records and every decision names, so an
// auditor holding the two files recomputes it (`leaseledger policy
// check`, or sha256sum as docs/policy.md shows) and ties decisions to the
// exact text. The digest covers bytes, not meaning: a reformatted file is
// another digest.
func (s *Set) Digest() string {
	if s == nil {
		return ""
	}
	return s.digest
}

// Len returns the number of policies.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.ids)
}

// IDs returns the policies' ids in file order (a copy).
func (s *Set) IDs() []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s.ids...)
}

// ReadsTime reports whether a policy of the set reads context.time (or
// the whole context): such a set's decisions depend on the clock, so
// SessionAccess never caches them.
func (s *Set) ReadsTime() bool { return s != nil && s.readsTime }

// cedarPos finds the position in a cedar-go parser or scanner message:
// "parser error: parse error at <input>:L:C "tok": …" or
// "parser error: <input>:L:C: …".
var cedarPos = regexp.MustCompile(`^(?:parser error: )?(?:parse error at )?<input>:(\d+):(\d+):? ?`)

// syntaxError turns cedar-go's parse error into an *Error with the line
// and column it names, and the rest of its message as the cause.
func syntaxError(file string, err error) *Error {
	msg := err.Error()
	e := &Error{File: file, Err: ErrSyntax}
	if m := cedarPos.FindStringSubmatchIndex(msg); m != nil {
		e.Line, _ = strconv.Atoi(msg[m[2]:m[3]])
		e.Column, _ = strconv.Atoi(msg[m[4]:m[5]])
		msg = msg[m[1]:]
		if strings.HasPrefix(msg, `"`) { // the token the parser stopped at
			msg = "at " + msg
		}
	}
	e.cause = errors.New(msg)
	return e
}

// maxSchemaMessages bounds the validator's messages an Error quotes: a
// policy without an action constraint is checked once per action, and the
// same mistake is reported for each of them.
const maxSchemaMessages = 3

// joinLines turns the validator's joined errors (one per line) into one
// line, so that an Error reads as one compiler message: repeats dropped,
// sorted, at most maxSchemaMessages quoted and the rest counted.
func joinLines(err error) error {
	var keep []string
	more := 0
	// Sorted: the validator checks the actions in map order, and the
	// same file must give the same message every time.
	lines := strings.Split(err.Error(), "\n")
	slices.Sort(lines)
	for _, m := range lines {
		switch {
		case m == "" || slices.Contains(keep, m):
		case len(keep) < maxSchemaMessages:
			keep = append(keep, m)
		default:
			more++
		}
	}
	s := strings.Join(keep, "; ")
	if more > 0 {
		s += "; and " + strconv.Itoa(more) + " more"
	}
	return errors.New(s)
}

// readsTime reports whether a policy may read context.time: whether the
// variable context appears anywhere other than as the operand of an
// attribute access or `has` of another attribute. It errs on the side of
// true (a policy that compares the whole context reads the time too).
func readsTime(p *xast.Policy) bool {
	found := false
	visit := func(n xast.IsNode) bool {
		if found {
			return false
		}
		var op xast.StrOpNode
		switch x := n.(type) {
		case xast.NodeTypeAccess:
			op = x.StrOpNode
		case xast.NodeTypeHas:
			op = x.StrOpNode
		case xast.NodeTypeVariable:
			found = found || x.Name == "context"
			return false
		default:
			return true
		}
		if v, ok := op.Arg.(xast.NodeTypeVariable); ok && v.Name == "context" {
			found = found || op.Value == "time"
			return false
		}
		return true
	}
	for _, c := range p.Conditions {
		xast.Inspect(xast.NewNode(c.Body), visit)
	}
	return found
}
