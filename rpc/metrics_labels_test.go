package rpc

import (
	"os"
	"strings"
	"testing"
)

// TestCodeLabelsDocumented: every value of rpc.request_errors' code
// label is listed in the package's metrics doc (metrics.go), so that
// dashboards can be written from the doc.
func TestCodeLabelsDocumented(t *testing.T) {
	src, err := os.ReadFile("metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.ReplaceAll(string(src), "\n//", "")
	for c := Code(0); c < 256; c++ {
		if c.Err() == nil {
			continue
		}
		if l := codeLabel(c); !strings.Contains(doc, " "+l+",") && !strings.Contains(doc, " "+l+" ") {
			t.Errorf("code %d's label %q is not in metrics.go's list", c, l)
		}
	}
}
