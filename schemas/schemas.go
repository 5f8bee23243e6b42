// Package schemas owns the JSON Schema (draft 2020-12) contract of the
// leaseledger event log for outside tools: compliance tooling, dashboards
// and producers that are not written in Go.
//
// The schema files are embedded with go:embed and are the same bytes that
// ship in the repository:
//
//   - envelope.json: a sealed event as stored in the ledger and published
//     on NATS (seq, id, time, kind, v, activation, session, server, data,
//     prev, hash);
//   - input.json: one input line as `leaseledger append` reads it (kind,
//     activation, session, server, data);
//   - kinds/<kind>.json: the "data" object of each event kind;
//   - api/<name>.request.json and api/<name>.reply.json: the requests and
//     replies of the control and projection APIs on the bus (package
//     control), name being the subject after "leaseledger.api." (e.g.
//     "runtime.revoke"); api/defs.json holds the objects they share.
//
// Every schema's $id is [BaseURL] followed by its path in [FS].
//
// A [Validator] compiles all of them once and validates documents against
// them; it is safe for concurrent use. The package deliberately does not
// import package events: it describes the wire contract, and tests in this
// package keep it in agreement with the Go types of events.
package schemas

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

//go:embed envelope.json input.json kinds/*.json api/*.json
var files embed.FS

// FS returns the embedded schema files: envelope.json, input.json,
// kinds/<kind>.json and api/*.json. Paths are slash-separated and relative to the schemas
// directory.
func FS() fs.FS { return files }

// BaseURL prefixes every schema's $id: the $id of a file at path p in [FS]
// is BaseURL + p.
const BaseURL = "https://leaseledger.dev/schemas/"

// Paths of the two non-kind schemas in [FS].
const (
	EnvelopePath = "envelope.json"
	InputPath    = "input.json"
)

// kindsDir holds one schema per event kind.
const kindsDir = "kinds"

// KindSchemaPath returns the path in [FS] of the schema for kind's "data"
// object, e.g. "kinds/lease.acquired.json". It does not check that the file
// exists; see [Kinds].
func KindSchemaPath(kind string) string { return kindsDir + "/" + kind + ".json" }

// apiDir holds the schemas of the bus APIs.
const apiDir = "api"

// APIRequestPath and APIReplyPath return the paths in [FS] of the request
// and reply schemas of the bus API name (e.g. "runtime.revoke"). They do
// not check that the files exist.
func APIRequestPath(name string) string { return apiDir + "/" + name + ".request.json" }

// APIReplyPath: see [APIRequestPath].
func APIReplyPath(name string) string { return apiDir + "/" + name + ".reply.json" }

// URL returns the $id of the schema at path p in [FS].
func URL(p string) string { return BaseURL + p }

// Kinds returns the kinds that have a schema file, in sorted order.
func Kinds() []string {
	entries, err := fs.ReadDir(files, kindsDir)
	if err != nil {
		panic("schemas: embedded kinds directory missing: " + err.Error()) // impossible: checked at build by go:embed
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// MaxDocumentBytes bounds the size of a document a [Validator] accepts.
// It is far above any valid event (the events package bounds a whole
// envelope to about 33 KiB) and only keeps a hostile input from costing
// unbounded memory.
const MaxDocumentBytes = 1 << 20

// maxNumberLen and maxExponent bound JSON number literals. No field in the
// vocabulary needs more than 20 digits or any exponent; a literal such as
// 1e999999 would make the validator's arbitrary-precision arithmetic cost
// tens of milliseconds per number, so such literals are refused up front.
const (
	maxNumberLen = 64
	maxExponent  = 400
)

// maxViolations bounds how many violations one [SchemaError] carries.
const maxViolations = 8

// Errors callers branch on. ErrUnknownKind and ErrMalformed wrap ErrSchema,
// so errors.Is(err, ErrSchema) holds for every failure the validator reports.
var (
	// ErrSchema marks a document that does not satisfy its schema.
	ErrSchema = errors.New("schema violation")
	// ErrUnknownKind marks a document whose kind has no schema.
	ErrUnknownKind = fmt.Errorf("%w: no schema for kind", ErrSchema)
	// ErrMalformed marks bytes that are not exactly one bounded JSON value.
	ErrMalformed = fmt.Errorf("%w: malformed JSON", ErrSchema)
)

// Violation is one failed schema rule.
type Violation struct {
	// Location is the JSON pointer of the offending value within the
	// document, e.g. "/data/fingerprint" ("" for the document itself).
	Location string
	// Keyword is the failing schema keyword, e.g. "pattern", "required".
	Keyword string
	// Message says what was expected. It is built from the schema only and
	// never echoes the offending value, which may be provider-controlled.
	Message string
}

func (v Violation) String() string {
	loc := v.Location
	if loc == "" {
		loc = "/"
	}
	return "at " + loc + ": " + v.Message
}

// SchemaError reports why a document does not satisfy its schema. It wraps
// [ErrSchema] (through [ErrUnknownKind] or [ErrMalformed] when those apply).
type SchemaError struct {
	// Schema is the path in [FS] of the schema that failed, e.g.
	// "envelope.json" or "kinds/lease.acquired.json"; "" for malformed input.
	Schema string
	// Kind is the event kind of the document, when it has a valid-looking one.
	Kind string
	// Detail is a one-line human-readable summary of the violations. Like
	// Violations, it never echoes document values.
	Detail string
	// Violations lists the failed rules (at most a few).
	Violations []Violation

	err error // ErrSchema, ErrUnknownKind or ErrMalformed
}

func (e *SchemaError) Error() string {
	var b strings.Builder
	b.WriteString("schemas: ")
	if e.Kind != "" {
		b.WriteString(e.Kind)
		b.WriteString(": ")
	}
	b.WriteString(e.Unwrap().Error())
	if e.Schema != "" {
		b.WriteString(" (")
		b.WriteString(e.Schema)
		b.WriteString(")")
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns the sentinel the error belongs to: ErrSchema,
// ErrUnknownKind or ErrMalformed.
func (e *SchemaError) Unwrap() error {
	if e.err == nil {
		return ErrSchema
	}
	return e.err
}

// Validator validates documents against the embedded schemas. Build it
// once with [NewValidator] (or use [Default]); it is immutable afterwards
// and safe for concurrent use.
type Validator struct {
	envelope *jsonschema.Schema
	input    *jsonschema.Schema
	kinds    map[string]*jsonschema.Schema
	api      map[string]*jsonschema.Schema // by path in FS
}

// NewValidator compiles the envelope, input and every kind schema from the
// embedded files. It does no network or file-system access.
func NewValidator() (*Validator, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	var paths []string
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".json" {
			return err
		}
		b, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("schemas: %s: %w", p, err)
		}
		if err := c.AddResource(URL(p), doc); err != nil {
			return fmt.Errorf("schemas: %s: %w", p, err)
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	v := &Validator{kinds: make(map[string]*jsonschema.Schema), api: make(map[string]*jsonschema.Schema)}
	compile := func(p string) (*jsonschema.Schema, error) {
		s, err := c.Compile(URL(p))
		if err != nil {
			return nil, fmt.Errorf("schemas: compile %s: %w", p, err)
		}
		return s, nil
	}
	if v.envelope, err = compile(EnvelopePath); err != nil {
		return nil, err
	}
	if v.input, err = compile(InputPath); err != nil {
		return nil, err
	}
	for _, k := range Kinds() {
		if v.kinds[k], err = compile(KindSchemaPath(k)); err != nil {
			return nil, err
		}
	}
	for _, p := range paths {
		if path.Dir(p) == apiDir {
			if v.api[p], err = compile(p); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

var defaultValidator = sync.OnceValues(NewValidator)

// Default returns a process-wide Validator, compiled on first use.
func Default() (*Validator, error) { return defaultValidator() }

// HasKind reports whether kind has a compiled schema.
func (v *Validator) HasKind(kind string) bool { _, ok := v.kinds[kind]; return ok }

// ValidateEnvelope validates a sealed event (envelope.json) and then its
// "data" against the schema of its "kind". A kind without a schema is an
// error wrapping [ErrUnknownKind]. Every failure is a *[SchemaError].
//
// It checks the schema contract only: not the canonical byte form nor the
// hash chain, which package events checks.
func (v *Validator) ValidateEnvelope(raw []byte) error {
	return v.validateWrapped(raw, v.envelope, EnvelopePath)
}

// ValidateInput validates one input line (input.json) and then its "data"
// against the schema of its "kind", like [Validator.ValidateEnvelope].
func (v *Validator) ValidateInput(raw []byte) error {
	return v.validateWrapped(raw, v.input, InputPath)
}

// ValidateData validates a bare "data" object against the schema of kind.
func (v *Validator) ValidateData(kind string, data []byte) error {
	doc, err := decode(data)
	if err != nil {
		return err
	}
	sch, ok := v.kinds[kind]
	if !ok {
		return unknownKind(kind)
	}
	return schemaError(sch.Validate(doc), KindSchemaPath(kind), kind, "")
}

// ValidateAPI validates a request or reply body of a bus API against the
// schema at path p in [FS] (APIRequestPath, APIReplyPath). A path with no
// API schema is an error wrapping [ErrSchema].
func (v *Validator) ValidateAPI(p string, body []byte) error {
	sch, ok := v.api[p]
	if !ok {
		return &SchemaError{Detail: "no API schema at this path", err: ErrSchema}
	}
	doc, err := decode(body)
	if err != nil {
		return err
	}
	return schemaError(sch.Validate(doc), p, "", "")
}

func (v *Validator) validateWrapped(raw []byte, outer *jsonschema.Schema, outerPath string) error {
	doc, err := decode(raw)
	if err != nil {
		return err
	}
	obj, _ := doc.(map[string]any)
	k, _ := obj["kind"].(string)
	if !kindPattern.MatchString(k) {
		k = "" // never echo a kind that is not even well-formed
	}
	if err := schemaError(outer.Validate(doc), outerPath, k, ""); err != nil {
		return err
	}
	sch, ok := v.kinds[k]
	if !ok {
		return unknownKind(k)
	}
	return schemaError(sch.Validate(obj["data"]), KindSchemaPath(k), k, "/data")
}

// kindPattern mirrors the "kind" pattern of envelope.json and input.json.
var kindPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$`)

func unknownKind(k string) error {
	if !kindPattern.MatchString(k) {
		k = ""
	}
	return &SchemaError{Kind: k, Detail: "no kinds/<kind>.json schema for this kind", err: ErrUnknownKind}
}

// decode parses raw as exactly one JSON value, keeping numbers exact, and
// refuses oversized documents and number literals.
func decode(raw []byte) (any, error) {
	if len(raw) > MaxDocumentBytes {
		return nil, &SchemaError{Detail: fmt.Sprintf("document is %d bytes, limit MaxDocumentBytes=%d", len(raw), MaxDocumentBytes), err: ErrMalformed}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		// encoding/json syntax errors name an offset, not content; other
		// errors are replaced by a fixed text.
		detail := "not a single JSON value"
		var se *json.SyntaxError
		if errors.As(err, &se) {
			detail = fmt.Sprintf("syntax error at offset %d", se.Offset)
		}
		return nil, &SchemaError{Detail: detail, err: ErrMalformed}
	}
	if loc, ok := badNumber(doc, ""); ok {
		return nil, &SchemaError{Detail: fmt.Sprintf("number literal at %s is longer than %d characters or has an exponent beyond ±%d", loc, maxNumberLen, maxExponent), err: ErrMalformed}
	}
	return doc, nil
}

// badNumber finds a number literal that is too long or has too large an
// exponent and returns its JSON pointer (object keys are not echoed: they
// may be provider text).
func badNumber(v any, loc string) (string, bool) {
	switch v := v.(type) {
	case json.Number:
		if len(v) > maxNumberLen {
			return loc, true
		}
		if i := strings.IndexAny(string(v), "eE"); i >= 0 {
			exp, err := strconv.Atoi(strings.TrimPrefix(string(v[i+1:]), "+"))
			if err != nil || exp > maxExponent || exp < -maxExponent {
				return loc, true
			}
		}
	case []any:
		for i, e := range v {
			if l, ok := badNumber(e, fmt.Sprintf("%s/%d", loc, i)); ok {
				return l, true
			}
		}
	case map[string]any:
		for k, e := range v {
			if l, ok := badNumber(e, loc+"/"+safeToken(k)); ok {
				return l, true
			}
		}
	}
	return "", false
}

var safeTokenPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// safeToken returns k if it is a plain identifier and "*" otherwise, so
// that arbitrary document keys never reach an error message.
func safeToken(k string) string {
	if safeTokenPattern.MatchString(k) {
		return k
	}
	return "*"
}

// schemaError converts a jsonschema validation error into a *SchemaError.
func schemaError(err error, schemaPath, kind, prefix string) error {
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &SchemaError{Schema: schemaPath, Kind: kind, Detail: "validation failed", err: ErrSchema}
	}
	var vs []Violation
	collect(ve, prefix, &vs)
	if len(vs) == 0 {
		vs = append(vs, Violation{Location: prefix, Message: "validation failed"})
	}
	details := make([]string, len(vs))
	for i, v := range vs {
		details[i] = v.String()
	}
	return &SchemaError{Schema: schemaPath, Kind: kind, Detail: strings.Join(details, "; "), Violations: vs, err: ErrSchema}
}

// collect appends the leaf violations of ve to vs, up to maxViolations.
func collect(ve *jsonschema.ValidationError, prefix string, vs *[]Violation) {
	if len(*vs) >= maxViolations {
		return
	}
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collect(c, prefix, vs)
		}
		return
	}
	var loc strings.Builder
	loc.WriteString(prefix)
	for _, tok := range ve.InstanceLocation {
		loc.WriteByte('/')
		loc.WriteString(safeToken(tok))
	}
	*vs = append(*vs, Violation{
		Location: loc.String(),
		Keyword:  strings.Join(ve.ErrorKind.KeywordPath(), "/"),
		Message:  message(ve.ErrorKind),
	})
}

// message describes a failed rule from the schema's side only.
func message(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("got %s, want %s", k.Got, strings.Join(k.Want, " or "))
	case *kind.Pattern:
		return "does not match pattern " + k.Want
	case *kind.Required:
		return "missing required " + quoteAll(k.Missing)
	case *kind.AdditionalProperties:
		var names []string
		for _, p := range k.Properties {
			names = append(names, safeToken(p))
		}
		return "unknown properties not allowed: " + quoteAll(names)
	case *kind.Minimum:
		return "must be ≥ " + k.Want.RatString()
	case *kind.Maximum:
		return "must be ≤ " + k.Want.RatString()
	case *kind.MinLength:
		return fmt.Sprintf("shorter than %d characters", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("longer than %d characters", k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("fewer than %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("more than %d items", k.Want)
	case *kind.Enum:
		return "must be one of " + jsonValues(k.Want...)
	case *kind.Const:
		return "must be " + jsonValues(k.Want)
	case *kind.Not:
		return "value is not allowed"
	default:
		return "fails " + strings.Join(k.KeywordPath(), "/")
	}
}

// jsonValues renders schema values (never document values) as JSON.
func jsonValues(vs ...any) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte("?")
		}
		out[i] = string(b)
	}
	return strings.Join(out, ", ")
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = `"` + s + `"`
	}
	return strings.Join(q, ", ")
}
