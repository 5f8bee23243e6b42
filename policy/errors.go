package policy

import (
	"errors"
	"strconv"
	"strings"

	"github.com/leaseledger/leaseledger/events"
)

// Sentinel errors of this package, carried in Error.Err; match them with
// errors.Is. Their text is static; the Cedar parser's or validator's
// message, when there is one, is the wrapped cause. Policy and entities
// files are the operator's own text, so a cause may quote them.
var (
	// ErrSyntax: the policy text is not Cedar (or the entities file not
	// JSON in Cedar's entities format).
	ErrSyntax = errors.New("policy: syntax error")
	// ErrSchema: a policy does not validate against the schema (strict
	// validation): an unknown entity type, action or attribute, an
	// attribute of the wrong type, an optional attribute read without
	// `has`, an action applied to a resource it does not take.
	ErrSchema = errors.New("policy: does not validate against the schema")
	// ErrEntities: an entity of the entities file does not conform to the
	// schema, is not a Principal or a Group, or is listed twice.
	ErrEntities = errors.New("policy: entity invalid")
	// ErrTooLarge: a file is larger than its bound (MaxPolicyFileBytes,
	// MaxEntitiesFileBytes, MaxCasesFileBytes) or holds more than
	// events.MaxPolicies policies or MaxCases cases.
	ErrTooLarge = errors.New("policy: too large")
	// ErrDuplicateID: two policies have the same id.
	ErrDuplicateID = errors.New("policy: duplicate policy id")
	// ErrInvalidID: an @id annotation breaks events.IDRule (ids are
	// recorded in events, which accept only that form).
	ErrInvalidID = errors.New("policy: invalid policy id, want " + events.IDRule)
	// ErrRead: a file could not be read.
	ErrRead = errors.New("policy: cannot read file")
	// ErrCases: an expectations file is malformed (unknown field, bad
	// action, expectation neither allow nor deny, …).
	ErrCases = errors.New("policy: cases invalid")
)

// Error says where a policy, entities or cases file is wrong, shaped like
// a compiler's message: the file, the line and column (1-based; 0 when
// unknown), the id of the policy concerned (policies only; "" otherwise),
// and Err, one of the Err* sentinels. The cause (the Cedar parser's or
// validator's message, or the file system's error) is wrapped beside it.
type Error struct {
	File   string
	Line   int
	Column int
	// Policy is the id of the policy concerned; for ErrEntities the uid
	// of the entity, for ErrCases the name or index of the case.
	Policy string
	Err    error
	cause  error
}

// Error returns "file:line:col: policy id: what: cause", leaving out the
// parts that are unknown.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
			if e.Column > 0 {
				b.WriteString(":" + strconv.Itoa(e.Column))
			}
		}
		b.WriteString(": ")
	}
	if e.Policy != "" {
		switch e.Err {
		case ErrEntities:
			b.WriteString("entity ")
		case ErrCases:
			b.WriteString("case ")
		default:
			b.WriteString("policy ")
		}
		b.WriteString(e.Policy + ": ")
	}
	// The sentinel's "policy: " prefix is dropped: the location above
	// already says where the message comes from.
	b.WriteString(strings.TrimPrefix(e.Err.Error(), "policy: "))
	if e.cause != nil {
		b.WriteString(": " + e.cause.Error())
	}
	return b.String()
}

// Unwrap exposes the sentinel and the cause to errors.Is/As.
func (e *Error) Unwrap() []error {
	if e.cause != nil {
		return []error{e.Err, e.cause}
	}
	return []error{e.Err}
}
