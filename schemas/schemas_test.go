package schemas_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/schemas"
)

const (
	examplesPath = "../examples/events.jsonl"
	docsPath     = "../docs/events.md"
)

func validator(t testing.TB) *schemas.Validator {
	t.Helper()
	v, err := schemas.NewValidator()
	if err != nil {
		t.Fatalf("NewValidator: %v", err)
	}
	return v
}

func registeredKinds() []string {
	var out []string
	for _, k := range events.Kinds() {
		out = append(out, string(k))
	}
	return out
}

// example is one line of examples/events.jsonl.
type example struct {
	line  []byte
	input events.Input
}

func readExamples(t testing.TB) []example {
	t.Helper()
	f, err := os.Open(examplesPath)
	if err != nil {
		t.Fatalf("open examples: %v", err)
	}
	defer f.Close()
	var out []example
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, events.MaxEventBytes+1)
	for n := 1; sc.Scan(); n++ {
		line := bytes.Clone(sc.Bytes())
		if len(bytes.TrimSpace(line)) == 0 {
			t.Fatalf("%s:%d: empty line", examplesPath, n)
		}
		var in events.Input
		if err := json.Unmarshal(line, &in); err != nil {
			t.Fatalf("%s:%d: %v", examplesPath, n, err)
		}
		out = append(out, example{line: line, input: in})
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read examples: %v", err)
	}
	return out
}

func readSchema(t testing.TB, p string) map[string]any {
	t.Helper()
	b, err := fs.ReadFile(schemas.FS(), p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return doc
}

// (a) every registered kind has a schema file and every schema file has a
// registered kind.
func TestEveryKindHasSchemaAndEverySchemaHasKind(t *testing.T) {
	registered := registeredKinds()
	withSchema := schemas.Kinds()
	if !slices.IsSorted(withSchema) {
		t.Errorf("schemas.Kinds() is not sorted: %v", withSchema)
	}
	for _, k := range registered {
		if !slices.Contains(withSchema, k) {
			t.Errorf("kind %s is registered in events but has no schema file %s", k, schemas.KindSchemaPath(k))
		}
	}
	for _, k := range withSchema {
		if !events.Known(events.Kind(k)) {
			t.Errorf("schema file %s has no registered kind %q in events", schemas.KindSchemaPath(k), k)
		}
	}
	// Nothing else may hide in the kinds directory.
	entries, err := fs.ReadDir(schemas.FS(), "kinds")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(withSchema) {
		t.Errorf("kinds/ holds %d entries, %d of them schemas", len(entries), len(withSchema))
	}
	v := validator(t)
	for _, k := range registered {
		if !v.HasKind(k) {
			t.Errorf("validator has no compiled schema for %s", k)
		}
	}
}

var structFieldJSON = regexp.MustCompile(`^([a-z0-9_]+)(,omitempty)?$`)

// Every schema is well-formed for auditors: $schema, $id, descriptions;
// kind schemas list exactly the Go payload's JSON fields, require exactly
// the fields without omitempty, and refuse additional properties.
func TestSchemaFilesDescribeGoTypes(t *testing.T) {
	for _, p := range []string{schemas.EnvelopePath, schemas.InputPath} {
		doc := readSchema(t, p)
		checkSchemaHeader(t, p, doc)
		if doc["additionalProperties"] != false {
			t.Errorf("%s: additionalProperties must be false", p)
		}
	}
	for _, k := range registeredKinds() {
		p := schemas.KindSchemaPath(k)
		doc := readSchema(t, p)
		checkSchemaHeader(t, p, doc)
		if doc["title"] != k {
			t.Errorf("%s: title %v, want %s", p, doc["title"], k)
		}
		if doc["type"] != "object" || doc["additionalProperties"] != false {
			t.Errorf("%s: want type object and additionalProperties false", p)
		}
		props, _ := doc["properties"].(map[string]any)
		var required []string
		for _, r := range doc["required"].([]any) {
			required = append(required, r.(string))
		}
		payload, err := events.New(events.Kind(k))
		if err != nil {
			t.Fatal(err)
		}
		typ := reflect.TypeOf(payload).Elem()
		var goFields, goRequired []string
		for i := range typ.NumField() {
			m := structFieldJSON.FindStringSubmatch(typ.Field(i).Tag.Get("json"))
			if m == nil {
				t.Errorf("%s: Go field %s has an unexpected json tag %q", k, typ.Field(i).Name, typ.Field(i).Tag.Get("json"))
				continue
			}
			goFields = append(goFields, m[1])
			if m[2] == "" {
				goRequired = append(goRequired, m[1])
			}
		}
		var schemaFields []string
		for name, ps := range props {
			schemaFields = append(schemaFields, name)
			if d, _ := ps.(map[string]any)["description"].(string); d == "" {
				t.Errorf("%s: property %s has no description", p, name)
			}
		}
		sort.Strings(schemaFields)
		sort.Strings(required)
		goSorted := slices.Sorted(slices.Values(goFields))
		sort.Strings(goRequired)
		if !slices.Equal(schemaFields, goSorted) {
			t.Errorf("%s: properties %v, Go type %s has %v", p, schemaFields, typ.Name(), goSorted)
		}
		if !slices.Equal(required, goRequired) {
			t.Errorf("%s: required %v, Go type %s has non-omitempty %v", p, required, typ.Name(), goRequired)
		}
	}
}

func checkSchemaHeader(t *testing.T, p string, doc map[string]any) {
	t.Helper()
	if doc["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("%s: $schema %v, want draft 2020-12", p, doc["$schema"])
	}
	if doc["$id"] != schemas.URL(p) {
		t.Errorf("%s: $id %v, want %s", p, doc["$id"], schemas.URL(p))
	}
	if d, _ := doc["description"].(string); len(d) < 20 {
		t.Errorf("%s: missing or too short description", p)
	}
	props, _ := doc["properties"].(map[string]any)
	for name, ps := range props {
		if d, _ := ps.(map[string]any)["description"].(string); d == "" {
			t.Errorf("%s: property %s has no description", p, name)
		}
	}
}

// (b) every example line parses with events.ParseInput and passes
// ValidateInput; there is exactly one line per input kind (none for a
// events.SystemOnly kind), sorted by kind.
func TestExamplesOnePerKind(t *testing.T) {
	v := validator(t)
	exs := readExamples(t)
	seen := map[string]int{}
	var order []string
	for i, ex := range exs {
		k := string(ex.input.Kind)
		seen[k]++
		order = append(order, k)
		if _, err := events.ParseInput(ex.line); err != nil {
			t.Errorf("line %d (%s): events.ParseInput: %v", i+1, k, err)
		}
		if err := v.ValidateInput(ex.line); err != nil {
			t.Errorf("line %d (%s): ValidateInput: %v", i+1, k, err)
		}
		// The schema's own example is this line's data.
		doc := readSchema(t, schemas.KindSchemaPath(k))
		if exs, _ := doc["examples"].([]any); len(exs) != 1 || !jsonEqual(t, mustJSON(t, exs[0]), ex.input.Data) {
			t.Errorf("%s: schema examples[0] differs from examples/events.jsonl", k)
		}
	}
	if !slices.IsSorted(order) {
		t.Errorf("examples are not sorted by kind: %v", order)
	}
	for _, k := range registeredKinds() {
		want := 1
		if events.SystemOnly(events.Kind(k)) {
			want = 0 // written only by the ledger itself: never an input line
		}
		if seen[k] != want {
			t.Errorf("kind %s has %d example lines, want exactly %d", k, seen[k], want)
		}
	}
	for k := range seen {
		if !events.Known(events.Kind(k)) {
			t.Errorf("example for unregistered kind %q", k)
		}
	}
}

var (
	fixedID   = ulid.MustParse("01JDQ8Z6M3V4K9X2R5T7W1Y0AB")
	fixedTime = time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.UTC)
)

// sealExamples seals every example line in file order, chained from the
// genesis prev, as the ledger's committer would.
func sealExamples(t testing.TB) [][]byte {
	t.Helper()
	var (
		out  [][]byte
		prev events.Hash
	)
	for i, ex := range readExamples(t) {
		d, err := events.ParseInput(ex.line)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		p, err := events.Prepare(d)
		if err != nil {
			t.Fatalf("line %d: Prepare: %v", i+1, err)
		}
		id := fixedID
		id[15] += byte(i)
		e, b := events.Seal(p, events.Seq(i+1), id, fixedTime.Add(time.Duration(i)*time.Millisecond), prev)
		prev = e.Hash
		out = append(out, b)
	}
	return out
}

// (c) every example, sealed, satisfies the envelope schema and its kind's.
func TestSealedExamplesValidate(t *testing.T) {
	v := validator(t)
	for _, b := range sealExamples(t) {
		if err := v.ValidateEnvelope(b); err != nil {
			t.Errorf("ValidateEnvelope(%s): %v", b, err)
		}
		e, err := events.Decode(b)
		if err != nil {
			t.Errorf("events.Decode(%s): %v", b, err)
		}
		// The envelope's data also passes the bare-data entry point.
		if err := v.ValidateData(string(e.Kind), e.Data); err != nil {
			t.Errorf("ValidateData(%s): %v", e.Kind, err)
		}
	}
}

// ---- (d) agreement between Go validation and the schemas ----

// mutation is one changed payload.
type mutation struct {
	name string
	data map[string]any
}

// stringValues are candidates for every string field: valid and invalid
// for the various rules (ids, digests, codes, tool names, text, times).
func stringValues() []any {
	hex64 := strings.Repeat("0123456789abcdef", 4)
	vals := []any{
		"", "NOT VALID!!", "x", "X", "a_b", "a-b", "a/b.c", "a.b", "_", "ok", "TERM",
		hex64, strings.ToUpper(hex64), hex64[:63], hex64 + "0", "g" + hex64[1:],
		strings.Repeat("a", 64), strings.Repeat("a", 65), strings.Repeat("a", 128), strings.Repeat("a", 129),
		strings.Repeat("a", 512), strings.Repeat("a", 513),
		"2026-11-30T10:00:02.500000000Z", "2026-11-30T10:00:02.5Z", "2026-11-30T10:00:02.500000000+00:00",
		"2026-11-30t10:00:02.500000000z", "2026-13-30T10:00:02.500000000Z", "2026-11-30T24:00:00.000000000Z",
		"2026-11-30 10:00:02.500000000Z", "tab\there", "line\nbreak",
		json.Number("42"), true, nil, []any{}, map[string]any{},
	}
	return vals
}

func intValues() []any {
	var vals []any
	for _, n := range []string{
		"-2", "-1", "0", "1", "2", "3", "4", "9", "10", "11", "255", "256", "299", "300", "307", "399", "400",
		"599", "600", "48213", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
		"1.5", "-0.5",
	} {
		vals = append(vals, json.Number(n))
	}
	return append(vals, "1", true, nil, []any{json.Number("1")})
}

func boolValues() []any { return []any{true, false, "true", json.Number("1"), nil} }

func arrayValues() []any {
	many := make([]any, events.MaxPIDList+1)
	for i := range many {
		many[i] = json.Number(fmt.Sprint(1000 + i))
	}
	return []any{
		[]any{}, []any{json.Number("1")}, []any{json.Number("0")}, []any{json.Number("-1")},
		[]any{json.Number("48230"), json.Number("48231")}, []any{"48230"}, []any{json.Number("1.5")},
		many[:events.MaxPIDList], many, "48230", nil, map[string]any{},
	}
}

// mutations derives, from one valid payload, every variant the agreement
// test checks. Candidate values come from the type of the field in the
// example (and every enum value listed anywhere in the schemas).
func mutations(t testing.TB, base map[string]any, enumValues []any) []mutation {
	t.Helper()
	clone := func() map[string]any {
		m := make(map[string]any, len(base)+1)
		for k, v := range base {
			m[k] = v
		}
		return m
	}
	var out []mutation
	add := func(name string, m map[string]any) { out = append(out, mutation{name, m}) }

	add("unchanged", clone())
	add("empty object", map[string]any{})
	m := clone()
	m["unexpected"] = json.Number("1")
	add("extra field", m)
	m = clone()
	m[""] = "x"
	add("extra empty-named field", m)

	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range base {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		m := clone()
		delete(m, k)
		add("drop "+k, m)

		m = clone()
		m[strings.ToUpper(k)] = m[k]
		delete(m, k)
		add("upper-case key "+k, m)

		var cands []any
		switch base[k].(type) {
		case string:
			cands = append(stringValues(), enumValues...)
		case json.Number:
			cands = intValues()
		case bool:
			cands = boolValues()
		case []any:
			cands = arrayValues()
		default:
			t.Fatalf("field %s: unexpected example type %T", k, base[k])
		}
		for _, c := range cands {
			m := clone()
			m[k] = c
			add(fmt.Sprintf("set %s=%s", k, short(mustJSON(t, c))), m)
		}
	}
	return out
}

func short(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%s…(%d bytes)", b[:40], len(b))
	}
	return string(b)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeNumbers(t testing.TB, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func jsonEqual(t testing.TB, a, b []byte) bool {
	return reflect.DeepEqual(decodeNumbers(t, a), decodeNumbers(t, b))
}

func allEnumValues(t testing.TB) []any {
	set := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["enum"].([]any); ok {
				for _, x := range e {
					if s, ok := x.(string); ok {
						set[s] = true
					}
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for _, k := range schemas.Kinds() {
		walk(readSchema(t, schemas.KindSchemaPath(k)))
	}
	var out []any
	for _, s := range slices.Sorted(func(yield func(string) bool) {
		for s := range set {
			if !yield(s) {
				return
			}
		}
	}) {
		out = append(out, s)
	}
	return out
}

// TestGoValidationAndSchemaAgree is what keeps events/ and schemas/ in
// sync. For every kind it mutates the example payload in many ways (drop
// each field, add a field, change key case, set each field to values of
// every shape) and requires that the schema accepts a payload exactly when
// Go accepts it in canonical form:
//
//	schema ok  ⇔  events.DecodePayload ok  ∧  re-encoding the payload gives the same JSON
//
// The second conjunct is the canonical-form rule that events.Decode applies
// to every stored event: encoding/json alone fills a missing field with its
// zero value, ignores null, matches keys case-insensitively and accepts ""
// or 0 for an omitempty field, none of which can appear in a stored event.
// In addition, whenever DecodePayload alone refuses a payload, the schema
// must refuse it too.
func TestGoValidationAndSchemaAgree(t *testing.T) {
	v := validator(t)
	enums := allEnumValues(t)
	total, lenient := 0, 0
	for _, ex := range readExamples(t) {
		kind := ex.input.Kind
		base, ok := decodeNumbers(t, ex.input.Data).(map[string]any)
		if !ok {
			t.Fatalf("%s: example data is not an object", kind)
		}
		for _, mu := range mutations(t, base, enums) {
			total++
			data := mustJSON(t, mu.data)
			p, goErr := events.DecodePayload(kind, data)
			canonical := goErr == nil && jsonEqual(t, mustJSON(t, p), data)
			schemaErr := v.ValidateData(string(kind), data)
			if goErr == nil && !canonical {
				lenient++
			}
			if canonical != (schemaErr == nil) {
				t.Errorf("%s %s: Go canonical ok=%v (DecodePayload err: %v), schema ok=%v (err: %v)\n  data: %s",
					kind, mu.name, canonical, goErr, schemaErr == nil, schemaErr, short(data))
			}
			if goErr != nil && schemaErr == nil {
				t.Errorf("%s %s: DecodePayload refuses (%v) but the schema accepts", kind, mu.name, goErr)
			}
			if schemaErr != nil && !errors.Is(schemaErr, schemas.ErrSchema) {
				t.Errorf("%s %s: schema error does not wrap ErrSchema: %v", kind, mu.name, schemaErr)
			}
		}
	}
	t.Logf("%d mutated payloads checked; %d accepted by DecodePayload only because encoding/json is lenient (refused in canonical form and by the schema)", total, lenient)
	if total < 30*len(events.Kinds()) {
		t.Errorf("only %d mutations: the agreement test is not broad enough", total)
	}
}

// The same agreement through the full input path: events.ParseInput with
// canonical re-encoding versus ValidateInput, for mutated identities.
func TestInputIdentitiesAgree(t *testing.T) {
	v := validator(t)
	ex := readExamples(t)[0]
	for _, field := range []string{"activation", "session", "server"} {
		for _, val := range []any{nil, "", "_", "a", "act-7", "a b", "a.b", "ä", strings.Repeat("a", 128), strings.Repeat("a", 129), json.Number("7")} {
			var m map[string]any
			if err := json.Unmarshal(ex.line, &m); err != nil {
				t.Fatal(err)
			}
			if val == nil {
				delete(m, field)
			} else {
				m[field] = val
			}
			line := mustJSON(t, m)
			_, goErr := events.ParseInput(line)
			goOK := goErr == nil && val != "" // "" is accepted by Go as "absent" but is not the canonical way to say so
			schemaErr := v.ValidateInput(line)
			if goOK != (schemaErr == nil) {
				t.Errorf("%s=%v: ParseInput err %v, ValidateInput err %v", field, val, goErr, schemaErr)
			}
		}
	}
}

// The envelope schema refuses malformed ids, times, hashes, versions,
// identities and shapes; the kind's schema refuses invalid data.
func TestEnvelopeRefusesBadEnvelopes(t *testing.T) {
	v := validator(t)
	sealed := sealExamples(t)
	good := sealed[len(sealed)-1]
	if err := v.ValidateEnvelope(good); err != nil {
		t.Fatalf("good envelope refused: %v", err)
	}
	hex64 := strings.Repeat("ab", 32)
	cases := []struct {
		field string
		val   any // nil: delete the field
	}{
		{"seq", json.Number("0")}, {"seq", json.Number("-1")}, {"seq", "1"}, {"seq", json.Number("1.5")},
		{"seq", json.Number("18446744073709551616")}, {"seq", nil},
		{"id", strings.ToLower(fixedID.String())}, {"id", fixedID.String()[:25]}, {"id", fixedID.String() + "0"},
		{"id", "8" + fixedID.String()[1:]}, {"id", "01JDQ8Z6M3V4K9X2R5T7W1Y0AI"}, {"id", "01JDQ8Z6M3V4K9X2R5T7W1Y0AU"},
		{"id", ""}, {"id", json.Number("1")}, {"id", nil},
		{"time", "2026-11-30T10:00:00Z"}, {"time", "2026-11-30T10:00:00.123Z"}, {"time", "2026-11-30T10:00:00.1234567890Z"},
		{"time", "2026-11-30T10:00:00.123456789+00:00"}, {"time", "2026-11-30T10:00:00.123456789"},
		{"time", "2026-11-30 10:00:00.123456789Z"}, {"time", "2026-11-30T10:00:00.123456789z"}, {"time", "2026-00-30T10:00:00.123456789Z"},
		{"time", "NOT VALID!!"}, {"time", nil},
		{"kind", "Lease.Acquired"}, {"kind", "lease"}, {"kind", "lease.acquired.extra"}, {"kind", "NOT VALID!!"}, {"kind", nil},
		{"v", json.Number("2")}, {"v", json.Number("0")}, {"v", "1"}, {"v", nil},
		{"activation", "_"}, {"activation", ""}, {"activation", "a b"}, {"activation", "a.b"}, {"activation", strings.Repeat("a", 129)},
		{"session", ""}, {"session", "s/19"}, {"server", ""}, {"server", "NOT VALID!!"},
		{"data", nil}, {"data", "x"}, {"data", []any{}}, {"data", map[string]any{}},
		{"prev", strings.ToUpper(hex64)}, {"prev", hex64[:63]}, {"prev", ""}, {"prev", nil},
		{"hash", strings.ToUpper(hex64)}, {"hash", hex64 + "0"}, {"hash", "g" + hex64[1:]}, {"hash", ""}, {"hash", nil},
		{"unexpected", "x"}, {"Seq", json.Number("1")},
	}
	for _, c := range cases {
		m := decodeNumbers(t, good).(map[string]any)
		if c.val == nil {
			delete(m, c.field)
		} else {
			m[c.field] = c.val
		}
		raw := mustJSON(t, m)
		err := v.ValidateEnvelope(raw)
		name := fmt.Sprintf("%s=%s", c.field, short(mustJSON(t, c.val)))
		if err == nil {
			t.Errorf("%s: envelope schema accepted %s", name, raw)
			continue
		}
		var se *schemas.SchemaError
		if !errors.As(err, &se) || !errors.Is(err, schemas.ErrSchema) {
			t.Errorf("%s: error %v is not a *SchemaError wrapping ErrSchema", name, err)
		}
		if _, decErr := events.Decode(raw); decErr == nil {
			t.Errorf("%s: events.Decode accepts what the schema refuses", name)
		}
	}

	// "_" is also refused as an activation in the input form.
	var in map[string]any
	if err := json.Unmarshal(readExamples(t)[0].line, &in); err != nil {
		t.Fatal(err)
	}
	in["activation"] = "_"
	if err := v.ValidateInput(mustJSON(t, in)); err == nil {
		t.Error(`input with activation "_" accepted`)
	}
}

func TestUnknownKindAndMalformed(t *testing.T) {
	v := validator(t)
	good := sealExamples(t)[0]
	m := decodeNumbers(t, good).(map[string]any)
	m["kind"] = "lease.unheard_of"
	err := v.ValidateEnvelope(mustJSON(t, m))
	if !errors.Is(err, schemas.ErrUnknownKind) || !errors.Is(err, schemas.ErrSchema) {
		t.Errorf("unknown kind: got %v, want ErrUnknownKind", err)
	}
	var se *schemas.SchemaError
	if !errors.As(err, &se) || se.Kind != "lease.unheard_of" {
		t.Errorf("unknown kind: SchemaError %+v", se)
	}
	if err := v.ValidateInput([]byte(`{"kind":"lease.unheard_of","data":{}}`)); !errors.Is(err, schemas.ErrUnknownKind) {
		t.Errorf("unknown kind in input: got %v", err)
	}
	if err := v.ValidateData("lease.unheard_of", []byte(`{}`)); !errors.Is(err, schemas.ErrUnknownKind) {
		t.Errorf("unknown kind in ValidateData: got %v", err)
	}
	// Each input is refused, and the costly ones by the bound that keeps
	// them cheap, before any schema is evaluated: the size bound (no
	// decoding of a huge document), the number-literal bound (no
	// arbitrary-precision arithmetic on 1e999999), the decoder's syntax
	// check. refusedBy is a text of the refusal's Detail ("" for any
	// malformed-JSON refusal); a schema refusal names its rule instead.
	const syntax, size, number = "", "limit MaxDocumentBytes", "number literal at "
	for _, c := range []struct{ raw, refusedBy string }{
		{``, syntax}, {`{`, syntax}, {`{"seq":1}{}`, syntax}, {`{"seq":1} x`, syntax}, {`nul`, syntax}, {`"\x"`, syntax},
		{`{"seq":1` + strings.Repeat("0", 100) + `}`, number + "/seq "},
		{`{"seq":1e999999999}`, number + "/seq "},
		{`{"data":` + strings.Repeat(" ", schemas.MaxDocumentBytes) + `{}}`, size},
		{`{"kind":"guardian.receipt","data":{"descendants_seen":[` + strings.Repeat("1e999999,", 2000) + `1]}}`, number + "/data/descendants_seen/0 "},
	} {
		err := v.ValidateEnvelope([]byte(c.raw))
		var se *schemas.SchemaError
		switch {
		case err == nil:
			t.Errorf("malformed %q accepted", short([]byte(c.raw)))
		case !errors.Is(err, schemas.ErrMalformed) || !errors.Is(err, schemas.ErrSchema):
			t.Errorf("malformed %q: %v is not ErrMalformed (refused after schema evaluation, not up front)", short([]byte(c.raw)), err)
		case !errors.As(err, &se) || se.Schema != "" || len(se.Violations) != 0 || !strings.Contains(se.Detail, c.refusedBy):
			t.Errorf("malformed %q: %+v, want refused up front by %q", short([]byte(c.raw)), se, c.refusedBy)
		}
	}
	// Deep nesting is well-formed JSON: refused by the envelope schema at
	// its root (an array is not an object), one violation, not a walk of
	// the nesting.
	err = v.ValidateEnvelope([]byte(strings.Repeat("[", 100) + strings.Repeat("]", 100)))
	if !errors.As(err, &se) || errors.Is(err, schemas.ErrMalformed) || len(se.Violations) != 1 ||
		se.Violations[0].Location != "" || se.Violations[0].Keyword != "type" {
		t.Errorf("deep nesting: %v (%+v), want one root type violation", err, se)
	}
}

// Errors never echo document values (they may be provider-controlled), and
// name the location and the rule instead.
func TestErrorsDoNotEchoValues(t *testing.T) {
	v := validator(t)
	const secret = "PROVIDER-SECRET-TEXT !!"
	for _, raw := range []string{
		`{"kind":"call.admitted","data":{"call_id":"` + secret + `","tool":"t","digest":"` + strings.Repeat("0", 64) + `"}}`,
		`{"kind":"call.admitted","data":{"call_id":"c","tool":"t","digest":"` + strings.Repeat("0", 64) + `","` + secret + `":1}}`,
		`{"kind":"call.admitted","activation":"` + secret + `","data":{}}`,
		`{"kind":"` + secret + `","data":{}}`,
		`{"kind":"call.admitted","` + secret + `":1,"data":{}}`,
		`{"kind":"call.admitted","data":{"call_id":"c","tool":"t","digest":"x","` + secret + `":1e999999999999999999999999999999999999999999999999999999999999999999999}}`,
	} {
		err := v.ValidateInput([]byte(raw))
		if err == nil {
			t.Errorf("accepted %s", raw)
			continue
		}
		if strings.Contains(err.Error(), "SECRET") {
			t.Errorf("error echoes document content: %v", err)
		}
	}
	err := v.ValidateInput([]byte(`{"kind":"call.admitted","data":{"call_id":"c","tool":"t","digest":"NOPE"}}`))
	var se *schemas.SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want *SchemaError", err)
	}
	if se.Kind != "call.admitted" || se.Schema != "kinds/call.admitted.json" || len(se.Violations) != 1 ||
		se.Violations[0].Location != "/data/digest" || se.Violations[0].Keyword != "pattern" {
		t.Errorf("SchemaError = %+v", se)
	}
	if !strings.Contains(err.Error(), "/data/digest") || strings.Contains(err.Error(), "NOPE") {
		t.Errorf("error text %q", err)
	}
}

func TestValidatorConcurrentUse(t *testing.T) {
	v, err := schemas.Default()
	if err != nil {
		t.Fatal(err)
	}
	if v2, _ := schemas.Default(); v2 != v {
		t.Error("Default() returned different validators")
	}
	sealed := sealExamples(t)
	bad := bytes.Replace(sealed[0], []byte(`"v":1`), []byte(`"v":2`), 1)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				b := sealed[(g+i)%len(sealed)]
				if err := v.ValidateEnvelope(b); err != nil {
					t.Errorf("ValidateEnvelope: %v", err)
					return
				}
				if err := v.ValidateEnvelope(bad); err == nil {
					t.Error("bad envelope accepted")
					return
				}
			}
		})
	}
	wg.Wait()
}

var kindHeading = regexp.MustCompile("(?m)^### ([a-z][a-z0-9_]*\\.[a-z][a-z0-9_]*)\\s*$")

// docs/events.md has a "### <kind>" section for every kind, no section for
// a kind that does not exist, and shows each kind's example line.
func TestDocsCatalogueEveryKind(t *testing.T) {
	doc, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatalf("read %s: %v", docsPath, err)
	}
	headings := map[string]int{}
	for _, m := range kindHeading.FindAllSubmatch(doc, -1) {
		headings[string(m[1])]++
	}
	for _, k := range registeredKinds() {
		if headings[k] != 1 {
			t.Errorf("%s: %d \"### %s\" headings, want 1", docsPath, headings[k], k)
		}
	}
	for k := range headings {
		if !events.Known(events.Kind(k)) {
			t.Errorf("%s documents unregistered kind %s", docsPath, k)
		}
	}
	for _, ex := range readExamples(t) {
		if !bytes.Contains(doc, ex.line) {
			t.Errorf("%s: example line of %s is missing or differs from %s", docsPath, ex.input.Kind, examplesPath)
		}
	}
}

func BenchmarkValidateEnvelope(b *testing.B) {
	v := validator(b)
	sealed := sealExamples(b)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := v.ValidateEnvelope(sealed[i%len(sealed)]); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzValidateEnvelope(f *testing.F) {
	v := validator(f)
	for _, b := range sealExamples(f) {
		f.Add(b)
	}
	f.Add([]byte(`{"kind":"lease.acquired","data":{"duration_ns":1e99999}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		err := v.ValidateEnvelope(raw)
		if err != nil && !errors.Is(err, schemas.ErrSchema) {
			t.Fatalf("error %v does not wrap ErrSchema", err)
		}
	})
}
