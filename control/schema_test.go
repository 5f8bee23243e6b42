package control_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/schemas"
)

// The Go types of each API's request and reply.
var apiTypes = map[string][2]any{
	control.LiveLeasesSubject: {control.LiveLeasesRequest{}, control.LeasesReply{}},
	control.RevokeSubject:     {control.RevokeRequest{}, control.RevokeReply{}},
	control.AllowSubject:      {control.AllowRequest{}, control.Done{}},
	control.EndSessionSubject: {control.EndSessionRequest{}, control.Done{}},
	control.ReapSubject:       {control.ReapRequest{}, control.ReapReply{}},
	control.ReloadSubject:     {control.ReloadRequest{}, control.ReloadReply{}},
	control.LeasesSubject:     {control.LeasesRequest{}, control.LeasesReply{}},
	control.ActivationSubject: {control.ActivationRequest{}, audit.Activation{}},
	control.AuditSubject:      {control.AuditRequest{}, audit.Summary{}},

	control.ProofCheckpointSubject: {control.CheckpointRequest{}, control.CheckpointReply{}},
	control.InclusionSubject:       {control.InclusionRequest{}, control.InclusionReply{}},
	control.ConsistencySubject:     {control.ConsistencyRequest{}, control.ConsistencyReply{}},
}

func readJSON(t *testing.T, p string) map[string]any {
	t.Helper()
	b, err := fs.ReadFile(schemas.FS(), p)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return doc
}

// Every subject has a request and a reply schema, every API schema file
// belongs to a subject (or is defs.json), and each is well-formed for
// auditors: $schema, $id, a description, and one on every property.
func TestSchemasCoverEverySubject(t *testing.T) {
	want := map[string]bool{"api/defs.json": true}
	for _, s := range control.Subjects {
		if _, ok := apiTypes[s]; !ok {
			t.Fatalf("%s: no Go types in apiTypes", s)
		}
		want[schemas.APIRequestPath(control.Name(s))] = true
		want[schemas.APIReplyPath(control.Name(s))] = true
	}
	entries, err := fs.ReadDir(schemas.FS(), "api")
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, e := range entries {
		p := "api/" + e.Name()
		have = append(have, p)
		if !want[p] {
			t.Errorf("%s belongs to no subject", p)
		}
		doc := readJSON(t, p)
		if doc["$schema"] != "https://json-schema.org/draft/2020-12/schema" || doc["$id"] != schemas.URL(p) {
			t.Errorf("%s: $schema %v, $id %v", p, doc["$schema"], doc["$id"])
		}
		if d, _ := doc["description"].(string); len(d) < 20 {
			t.Errorf("%s: missing or too short description", p)
		}
		describedProperties(t, p, doc)
	}
	for p := range want {
		if !slices.Contains(have, p) {
			t.Errorf("%s is missing", p)
		}
	}
}

// describedProperties fails for a property schema without a description,
// at any depth.
func describedProperties(t *testing.T, where string, node any) {
	switch n := node.(type) {
	case map[string]any:
		if props, ok := n["properties"].(map[string]any); ok {
			for name, ps := range props {
				m, _ := ps.(map[string]any)
				if _, ref := m["$ref"]; !ref && len(m) > 0 && (m["description"] == nil) && n["type"] == "object" {
					t.Errorf("%s: property %s has no description", where, name)
				}
			}
		}
		for k, v := range n {
			describedProperties(t, where+"/"+k, v)
		}
	case []any:
		for _, v := range n {
			describedProperties(t, where, v)
		}
	}
}

// schemaWalker compares Go types with the API schemas.
type schemaWalker struct {
	t    *testing.T
	defs map[string]any
}

// resolve follows a reference into api/defs.json.
func (w *schemaWalker) resolve(node map[string]any) map[string]any {
	ref, _ := node["$ref"].(string)
	for _, prefix := range []string{"defs.json#/$defs/", "#/$defs/"} {
		if name, ok := strings.CutPrefix(ref, prefix); ok {
			d, ok := w.defs[name].(map[string]any)
			if !ok {
				w.t.Fatalf("no $defs/%s", name)
			}
			return w.resolve(d)
		}
	}
	return node
}

var (
	instantType = reflect.TypeOf(events.Instant{})
	rawType     = reflect.TypeOf(json.RawMessage{})
	bytesType   = reflect.TypeOf([]byte{})
	payloadType = reflect.TypeOf((*events.Payload)(nil)).Elem()
)

// walk checks that node describes typ exactly: every JSON field of a
// struct is a property, the required ones are those without omitempty,
// no other property is allowed; recursively.
func (w *schemaWalker) walk(where string, typ reflect.Type, node map[string]any) {
	t := w.t
	if typ.Kind() == reflect.Pointer && typ.Implements(payloadType) {
		kind := reflect.New(typ.Elem()).Interface().(events.Payload).Kind()
		if node["$ref"] != "../kinds/"+string(kind)+".json" {
			t.Errorf("%s: want a reference to kinds/%s.json, have %v", where, kind, node["$ref"])
		}
		return
	}
	node = w.resolve(node)
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch {
	case typ == instantType:
		if node["pattern"] == nil || node["type"] != "string" {
			t.Errorf("%s: a time wants a string with a pattern", where)
		}
		return
	case typ == rawType:
		if node["type"] != "object" {
			t.Errorf("%s: event data wants type object", where)
		}
		return
	case typ == bytesType:
		if node["type"] != "string" || node["contentEncoding"] != "base64" {
			t.Errorf("%s: bytes want a base64 string", where)
		}
		return
	}
	want := map[reflect.Kind]string{reflect.String: "string", reflect.Bool: "boolean", reflect.Int: "integer", reflect.Int64: "integer",
		reflect.Uint64: "integer", reflect.Struct: "object", reflect.Map: "object", reflect.Slice: "array", reflect.Array: "array"}[typ.Kind()]
	if want == "" || node["type"] != want {
		t.Errorf("%s: Go %s, schema type %v", where, typ, node["type"])
		return
	}
	switch typ.Kind() {
	case reflect.Slice, reflect.Array:
		items, _ := node["items"].(map[string]any)
		if typ.Kind() == reflect.Array && (node["minItems"] != float64(typ.Len()) || node["maxItems"] != float64(typ.Len())) {
			t.Errorf("%s: an array of %d wants minItems and maxItems %d", where, typ.Len(), typ.Len())
		}
		w.walk(where+"[]", typ.Elem(), items)
	case reflect.Map:
		ap, _ := node["additionalProperties"].(map[string]any)
		w.walk(where+"{}", typ.Elem(), ap)
	case reflect.Struct:
		props, _ := node["properties"].(map[string]any)
		if node["additionalProperties"] != false {
			t.Errorf("%s: additionalProperties must be false", where)
		}
		var goNames, goRequired, required, names []string
		reqs, _ := node["required"].([]any)
		for _, r := range reqs {
			required = append(required, r.(string))
		}
		for name := range props {
			names = append(names, name)
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			goNames = append(goNames, name)
			if opts != "omitempty" && opts != "omitzero" {
				goRequired = append(goRequired, name)
			}
			ps, _ := props[name].(map[string]any)
			if ps == nil {
				continue
			}
			w.walk(where+"."+name, f.Type, ps)
		}
		slices.Sort(goNames)
		slices.Sort(names)
		slices.Sort(goRequired)
		slices.Sort(required)
		if !slices.Equal(goNames, names) {
			t.Errorf("%s: properties %v, Go %s has %v", where, names, typ, goNames)
		}
		if !slices.Equal(goRequired, required) {
			t.Errorf("%s: required %v, Go %s has non-omitempty %v", where, required, typ, goRequired)
		}
	}
}

// Each API schema describes its Go type exactly, nested types included
// (event payloads are referenced: their own schemas are checked in
// package schemas).
func TestSchemasDescribeGoTypes(t *testing.T) {
	w := &schemaWalker{t: t, defs: readJSON(t, "api/defs.json")["$defs"].(map[string]any)}
	for subject, types := range apiTypes {
		name := control.Name(subject)
		w.walk(schemas.APIRequestPath(name), reflect.TypeOf(types[0]), readJSON(t, schemas.APIRequestPath(name)))
		w.walk(schemas.APIReplyPath(name), reflect.TypeOf(types[1]), readJSON(t, schemas.APIReplyPath(name)))
	}
}

func validator(t *testing.T) *schemas.Validator {
	v, err := schemas.Default()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Every reply the handlers produce validates against its schema: each
// subject, full and cut replies, first and last pages.
func TestRepliesValidate(t *testing.T) {
	p := openProjection(t)
	fixture(t, p)
	var ds []events.Draft
	for i := range 40 { // 40 requests of 16 wire ids of 500 bytes (twice, in the steps): more than MaxReplyBytes
		h := fmt.Sprintf("rq-%d", i)
		pls := []events.Payload{&events.RequestRegistered{Handle: h, Owner: "o-1", Method: "resources/read", TimeoutNS: 1e9}}
		for j := range 16 {
			pls = append(pls, &events.RequestDispatched{Handle: h, WireID: fmt.Sprintf("%s-%d", strings.Repeat("w", 490), j)})
		}
		pls = append(pls, &events.RequestCancelled{Handle: h, Reason: "caller", LocalSettled: true, TransportAccepted: "yes", NotificationDelivered: "unknown", Remote: "unknown"})
		for _, pl := range pls {
			ds = append(ds, events.Draft{Activation: "act-big", Session: "s-1", Server: "srv", Payload: pl})
		}
	}
	// act-mcp: what the dashboard shows of the MCP traffic beside calls (relays,
	// subscriptions, list changes, request methods; its session's log
	// level on the lease row).
	ds = append(ds, events.Draft{Session: "s-3", Payload: &events.SessionOpened{Transport: events.SessionMCPHTTP}},
		events.Draft{Session: "s-3", Payload: &events.SessionLogLevel{Level: events.LogWarning}})
	ds = append(ds, leaseDrafts("act-mcp", "s-3", "delta", false, false)...)
	for _, pl := range []events.Payload{
		&events.RequestRegistered{Handle: "sub-1", Owner: "o-3", Method: events.MethodSubscribe, URISHA256: listingDigest, TimeoutNS: 1e9},
		&events.RequestCompleted{Handle: "sub-1", Outcome: events.RequestOK},
		&events.SubscriptionStarted{Handle: "sub-1", URISHA256: listingDigest},
		&events.LeaseListChanged{List: events.ListPrompts},
		&events.RelayCompleted{Method: events.RelayElicit, Outcome: events.RelayDeclined, Mode: events.ElicitForm, DurationNS: 1},
	} {
		ds = append(ds, events.Draft{Activation: "act-mcp", Session: "s-3", Server: "delta", Payload: pl})
	}
	appendDrafts(t, p, ds)
	rt := &fakeRuntime{reaped: 1}
	b := startAPI(t, p, rt, bus.Options{})
	nc := dial(t, b, ctlUser, ctlPass)
	v := validator(t)
	check := func(subject, body string) []byte {
		t.Helper()
		reply := raw(t, nc, ctlUser, subject, body)
		if err := v.ValidateAPI(schemas.APIReplyPath(control.Name(subject)), reply); err != nil {
			t.Fatalf("%s %s: %v\n%.2000s", subject, body, err, reply)
		}
		return reply
	}
	for _, subject := range []string{control.LeasesSubject, control.LiveLeasesSubject} {
		next := ""
		for {
			var r control.LeasesReply
			if err := json.Unmarshal(check(subject, fmt.Sprintf(`{"limit":1,"after":%q}`, next)), &r); err != nil {
				t.Fatal(err)
			}
			if next = r.Next; next == "" {
				break
			}
		}
	}
	check(control.LeasesSubject, `{"session":"nobody"}`) // an empty page
	for _, id := range []string{"act-ok", "act-bad", "act-open", "act-1", "act-2", "act-big", "act-mcp"} {
		check(control.ActivationSubject, fmt.Sprintf(`{"activation":%q}`, id))
	}
	// The names web/dashboard/app.js reads (dashboard.TestBundleReadsActivity
	// holds the bundle to them).
	for subject, body := range map[string]string{control.ActivationSubject: `{"activation":"act-mcp"}`, control.LeasesSubject: `{"session":"s-3"}`} {
		reply := string(check(subject, body))
		for _, want := range map[string][]string{
			control.ActivationSubject: {`"relays":{"declined":1}`, `"subscriptions":{"started":1,"open":1}`, `"list_changes":{"prompts":1}`,
				`"request_methods":{"resources/subscribe":{"registered":1,"ok":1}}`},
			control.LeasesSubject: {`"log_level":"warning"`},
		}[subject] {
			if !strings.Contains(reply, want) {
				t.Fatalf("%s %s lacks %s:\n%.2000s", subject, body, want, reply)
			}
		}
	}
	var a audit.Activation
	if err := json.Unmarshal(check(control.ActivationSubject, `{"activation":"act-big"}`), &a); err != nil || a.RequestsOmitted == 0 {
		t.Fatalf("act-big was not cut (%d requests omitted): %v", a.RequestsOmitted, err)
	}
	check(control.AuditSubject, `{}`)
	check(control.AuditSubject, `{"limit":1}`)
	check(control.RevokeSubject, `{"session":"s-1","server":"alpha","reason":"operator"}`)
	check(control.AllowSubject, `{"session":"s-1","server":"alpha"}`)
	check(control.EndSessionSubject, `{"session":"s-1"}`)
	check(control.ReapSubject, `{}`)
	check(control.ReloadSubject, `{}`) // nothing added or removed: empty lists, not null
	rt.mu.Lock()
	many := make([]string, control.MaxReloadNames+6)
	for i := range many {
		many[i] = fmt.Sprintf("server-%03d", i)
	}
	rt.reload = control.ReloadReply{Servers: 1, Added: many, Removed: []string{"old"}, LeasesEnded: 2, RecordFailed: true}
	rt.mu.Unlock()
	if r := check(control.ReloadSubject, `{}`); !strings.Contains(string(r), `"added_omitted":6`) {
		t.Fatalf("reload: %s", r)
	}
	check(control.ProofCheckpointSubject, `{}`)
	check(control.InclusionSubject, `{"seq":1,"size":1}`)
	check(control.InclusionSubject, `{"seq":17,"size":40}`)
	check(control.ConsistencySubject, `{"from":5,"to":5}`)
	check(control.ConsistencySubject, `{"from":3,"to":40}`)
	rt.mu.Lock()
	rt.err = fmt.Errorf("not recorded")
	rt.mu.Unlock()
	if r := check(control.ReapSubject, `{"idle_max_ns":1}`); !strings.Contains(string(r), `"record_failed":true`) {
		t.Fatalf("reap: %s", r)
	}
}

// serverStricter marks request bodies the schemas accept and the server
// refuses, because JSON Schema cannot say it: lengths in bytes (a schema
// counts characters) and integers written with a fraction.
const serverStricter = true

// Every request schema accepts exactly what the server accepts (parser
// and checks), on a table of good and bad bodies per subject.
func TestRequestSchemasAgreeWithServer(t *testing.T) {
	p := openProjection(t)
	fixture(t, p)
	b := startAPI(t, p, &fakeRuntime{}, bus.Options{})
	nc := dial(t, b, ctlUser, ctlPass)
	v := validator(t)
	long := strings.Repeat("é", 200) // 200 characters, 400 bytes
	cases := map[string][]struct {
		body     string
		ok       bool
		stricter bool
	}{
		control.LeasesSubject: {
			{`{}`, true, false}, {`{"limit":0}`, true, false}, {`{"limit":1000}`, true, false}, {`{"limit":1001}`, false, false}, {`{"limit":-1}`, false, false},
			{`{"session":"s-1","live":true,"after":"s-1/alpha"}`, true, false}, {`{"session":""}`, true, false}, {`{"session":"_shared"}`, true, false},
			{`{"session":"a b"}`, false, false}, {`{"live":"yes"}`, false, false}, {`{"live":null}`, false, false}, {`{"Limit":1}`, false, false},
			{`{"limit":1.5}`, false, false}, {`{"limit":1.0}`, false, serverStricter}, {`{"after":"` + strings.Repeat("a", 258) + `"}`, false, false},
			{`{"after":"` + long + `"}`, false, serverStricter}, {`{"x":1}`, false, false}, {`[]`, false, false}, {`{} {}`, false, false}, {``, false, false},
		},
		control.LiveLeasesSubject: {
			{`{}`, true, false}, {`{"limit":5,"after":"s-1/a","session":"s-1"}`, true, false}, {`{"live":true}`, false, false}, {`{"limit":1001}`, false, false},
		},
		control.RevokeSubject: {
			{`{"session":"s-1","server":"alpha","reason":"operator"}`, true, false},
			{`{"session":"s-1","server":"my.server","reason":"operator","deny":true,"shared":false}`, true, false},
			{`{"shared":true,"server":"alpha","reason":"operator"}`, true, false},
			{`{"shared":true,"session":"","server":"alpha","reason":"operator","deny":false}`, true, false},
			{`{"shared":true,"session":"s-1","server":"alpha","reason":"operator"}`, false, false},
			{`{"server":"alpha","reason":"operator"}`, false, false},
			{`{"shared":false,"session":"","server":"alpha","reason":"operator"}`, false, false},
			{`{"session":"_shared","server":"alpha","reason":"operator"}`, false, false},
			{`{"session":"s-1","server":"","reason":"operator"}`, false, false},
			{`{"session":"s-1","reason":"operator"}`, false, false},
			{`{"session":"s-1","server":"alpha"}`, false, false},
			{`{"session":"s-1","server":"alpha","reason":"Operator"}`, false, false},
			{`{"session":"s-1","server":"` + strings.Repeat("n", 257) + `","reason":"x"}`, false, false},
			{`{"session":"s-1","server":"` + long + `","reason":"x"}`, false, serverStricter},
			{`{"session":"s-1","server":"alpha","reason":"x","deny":null}`, false, false},
		},
		control.AllowSubject: {
			{`{"session":"s-1","server":"alpha"}`, true, false},
			{`{"shared":true,"server":"my.server"}`, true, false},
			{`{"shared":true,"session":"s-1","server":"alpha"}`, false, false},
			{`{"server":"alpha"}`, false, false},
			{`{"session":"_shared","server":"alpha"}`, false, false},
			{`{"session":"s-1","server":""}`, false, false},
			{`{"session":"s-1","server":"alpha","reason":"x"}`, false, false},
			{`{"session":"s-1","server":"` + long + `"}`, false, serverStricter},
		},
		control.EndSessionSubject: {
			{`{"session":"s-1"}`, true, false}, {`{}`, false, false}, {`{"session":""}`, false, false}, {`{"session":"_shared"}`, false, false},
			{`{"session":"a.b"}`, false, false}, {`{"session":"s-1","x":1}`, false, false},
		},
		control.ReapSubject: {
			{`{}`, true, false}, {`{"idle_max_ns":0}`, true, false}, {`{"idle_max_ns":9223372036854775807}`, true, false},
			{`{"idle_max_ns":9223372036854775808}`, false, false}, {`{"idle_max_ns":-1}`, false, false}, {`{"idle_max_ns":"1s"}`, false, false},
			{`{"idle_max_ns":1e3}`, false, serverStricter},
		},
		control.ReloadSubject: {
			{`{}`, true, false}, {`{"x":1}`, false, false}, {`{"force":true}`, false, false}, {`[]`, false, false}, {`{} {}`, false, false},
			{`null`, false, false},
		},
		control.ActivationSubject: {
			{`{"activation":"act-ok"}`, true, false}, {`{"activation":"act-ok","timeline":0}`, true, false}, {`{"activation":"act-ok","timeline":1000}`, true, false},
			{`{"activation":"act-ok","timeline":1001}`, false, false}, {`{"activation":"act-ok","timeline":-1}`, false, false}, {`{}`, false, false},
			{`{"activation":""}`, false, false}, {`{"activation":"a/b"}`, false, false}, {`{"activation":"` + strings.Repeat("a", 129) + `"}`, false, false},
		},
		control.AuditSubject: {
			{`{}`, true, false}, {`{"limit":1000}`, true, false}, {`{"limit":1001}`, false, false}, {`{"limit":-5}`, false, false}, {`{"limit":null}`, false, false},
		},
		control.ProofCheckpointSubject: {
			{`{}`, true, false}, {`{"size":1}`, false, false}, {`[]`, false, false}, {`{} {}`, false, false},
		},
		control.InclusionSubject: {
			{`{"seq":1,"size":2}`, true, false}, {`{"seq":2,"size":2}`, true, false}, {`{"seq":3,"size":2}`, false, serverStricter},
			{`{"seq":0,"size":2}`, false, false}, {`{"size":2}`, false, false}, {`{"seq":1}`, false, false}, {`{"seq":-1,"size":2}`, false, false},
			{`{"seq":1,"size":2,"x":1}`, false, false}, {`{"seq":"1","size":2}`, false, false}, {`{"seq":1.5,"size":2}`, false, false},
		},
		control.ConsistencySubject: {
			{`{"from":1,"to":2}`, true, false}, {`{"from":2,"to":2}`, true, false}, {`{"from":3,"to":2}`, false, serverStricter},
			{`{"from":0,"to":2}`, false, false}, {`{"to":2}`, false, false}, {`{"from":1}`, false, false}, {`{"from":1,"to":null}`, false, false},
		},
	}
	for _, subject := range control.Subjects {
		if len(cases[subject]) == 0 {
			t.Fatalf("%s: no cases", subject)
		}
		for _, c := range cases[subject] {
			schemaOK := v.ValidateAPI(schemas.APIRequestPath(control.Name(subject)), []byte(c.body)) == nil
			m, err := nc.Request(busclient.UserSubject(subject, ctlUser), []byte(c.body), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			serverOK := m.Header.Get(busclient.HeaderErrorCode) != busclient.CodeBadRequest
			if e := m.Header.Get(busclient.HeaderError); serverOK && e != "" {
				t.Fatalf("%s %.60s: refused otherwise: %s", subject, c.body, e)
			}
			if serverOK != c.ok {
				t.Errorf("%s %.60s: server accepts %v, want %v", subject, c.body, serverOK, c.ok)
			}
			if wantSchema := c.ok || c.stricter; schemaOK != wantSchema {
				t.Errorf("%s %.60s: schema accepts %v, want %v", subject, c.body, schemaOK, wantSchema)
			}
		}
	}
}
