// Package docs holds the guides; its test checks that every relative link
// in README.md and docs/*.md resolves to a file or directory of the
// repository and, when it names an anchor in a Markdown file, to one of
// that file's headings (GitHub's anchors) or explicit <a id> or <a name>.
// Links in code blocks and code spans are not links and are not checked;
// links to other sites are not checked.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLink    = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]]+\]:\s*(\S+)`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

func TestRelativeLinksResolve(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"))
	anchors := map[string]map[string]bool{} // by cleaned path
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchors[path] = markdownAnchors(string(text))
		return anchors[path], nil
	}
	checked := 0
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(text)) {
			target, anchor, _ := strings.Cut(l.target, "#")
			if strings.Contains(target, ":") || strings.HasPrefix(target, "//") {
				continue // another site (https:, mailto:)
			}
			checked++
			path := filepath.Clean(file)
			if target != "" {
				path = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link to %s: %v", file, l.line, l.target, err)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Errorf("%s:%d: link to %s: %v", file, l.line, l.target, err)
			} else if !a[anchor] {
				t.Errorf("%s:%d: link to %s: %s has no heading or anchor %q", file, l.line, l.target, path, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: is the test reading the right files?")
	}
}

type link struct {
	target string
	line   int
}

// markdownLinks returns the targets of the inline and reference links in
// text, outside code blocks and code spans.
func markdownLinks(text string) []link {
	var links []link
	for i, line := range proseLines(text) {
		if line == "" {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			links = append(links, link{strings.Trim(m[1], "<>"), i + 1})
		}
		for _, m := range refLink.FindAllStringSubmatch(line, -1) {
			links = append(links, link{strings.Trim(m[1], "<>"), i + 1})
		}
	}
	return links
}

// proseLines returns text's lines with those of fenced and indented code
// blocks blanked, so that line numbers stay those of the file.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fence := ""
	prevBlank := true
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
			continue
		case strings.HasPrefix(trimmed, "```"), strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
			lines[i] = ""
			continue
		case prevBlank && strings.HasPrefix(line, "    "):
			lines[i] = ""
			continue // an indented code block, until a blank line
		}
		prevBlank = strings.TrimSpace(line) == ""
	}
	return lines
}

// markdownAnchors returns the anchors GitHub gives text's headings, and the
// explicit <a id> and <a name> anchors.
func markdownAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(text) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := slugify(m[1])
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// slugify is GitHub's heading anchor: lower case, punctuation dropped
// (hyphens and underscores kept), spaces turned into hyphens.
func slugify(heading string) string {
	heading = inlineLink.ReplaceAllString(heading, "]") // [text](url) -> [text]
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-', r == '_', unicode.IsLetter(r), unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlugify(t *testing.T) {
	for heading, want := range map[string]string{
		"Power losses: `--lose-unsynced`":            "power-losses---lose-unsynced",
		"Stale rejections: seeing fencing at work":   "stale-rejections-seeing-fencing-at-work",
		"Guards: enforcing tokens where writes land": "guards-enforcing-tokens-where-writes-land",
		"3.8 Uncertain outcomes":                     "38-uncertain-outcomes",
		"`fenced store`":                             "fenced-store",
	} {
		if got := slugify(heading); got != want {
			t.Errorf("slugify(%q) = %q, want %q", heading, got, want)
		}
	}
}
