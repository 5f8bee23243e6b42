package policy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The examples of docs/policy.md are real: its Cedar blocks, with its
// entities file, parse and validate as one policy set, and its cases
// file passes against them.
func TestDocsExamples(t *testing.T) {
	b, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string][]string{}
	for _, m := range regexp.MustCompile("(?s)```(cedar|json)\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		blocks[m[1]] = append(blocks[m[1]], m[2])
	}
	if len(blocks["cedar"]) != 3 || len(blocks["json"]) != 2 {
		t.Fatalf("docs/policy.md: %d cedar and %d json blocks, want 3 and 2", len(blocks["cedar"]), len(blocks["json"]))
	}
	set, err := Parse("docs/policy.md", []byte(strings.Join(blocks["cedar"], "\n")), "entities", []byte(blocks["json"][0]))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := ParseCases([]byte(blocks["json"][1]))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range set.Test(cases) {
		if !r.Passed {
			t.Errorf("docs/policy.md case %s: %s", r.Label(), r.Problem)
		}
	}
}
