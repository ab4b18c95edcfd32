package tests

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// spanAttributes are the attributes of the spans, beside the metrics'.
var spanAttributes = []string{"messaging.operation.type", "messaging.batch.message_count", "messaging.kafka.offset",
	"redeliver.retry", "redeliver.outcome"}

// vocabulary returns every metric and attribute name the table and the
// spans use.
func vocabulary() map[string]bool {
	v := map[string]bool{}
	for _, r := range metricTable {
		v[r.name] = true
		_, allowed := r.keys()
		for k := range allowed {
			v[k] = true
		}
	}
	for _, a := range spanAttributes {
		v[a] = true
	}
	return v
}

var dotted = regexp.MustCompile(`\b(?:messaging|redeliver)\.[a-z_.]*[a-z_]`)

// checkMentions reports the metric and attribute names text mentions that
// neither the table nor the spans have: a renamed metric left in a doc.
func checkMentions(t *testing.T, where, text string) {
	t.Helper()
	v := vocabulary()
	for _, name := range dotted.FindAllString(text, -1) {
		if !v[name] {
			t.Errorf("%s mentions %s, which is neither a metric nor an attribute", where, name)
		}
	}
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The package doc, rdotel's README and the repository's README name one
// set of metrics, each with the same instrument, unit and attributes as
// the metric table that TestConformance checks the export against.
func TestDocsNameOneSetOfMetrics(t *testing.T) {
	doc := readDoc(t, "../doc.go")
	row := regexp.MustCompile(`(?m)^//\t((?:messaging|redeliver)\.\S+)\s+(\S+)\s+(\S+)\s+(.+)$`)
	var docRows []tableRow
	for _, m := range row.FindAllStringSubmatch(doc, -1) {
		docRows = append(docRows, tableRow{m[1], m[2], m[3], m[4]})
	}
	if !slices.Equal(docRows, metricTable) {
		t.Errorf("doc.go's metric table:\n%v\nwant\n%v", docRows, metricTable)
	}
	checkMentions(t, "doc.go", doc)
	checkMentions(t, "README.md", readDoc(t, "../README.md"))

	// The repository's README, when the module is in its repository.
	readme, err := os.ReadFile("../../README.md")
	if os.IsNotExist(err) {
		t.Skip("no ../../README.md: the module is not in its repository")
	}
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "\n## Telemetry\n")
	section, _, _ = strings.Cut(section, "\n## ")
	cell := regexp.MustCompile(`(?m)^\| (?:\*\*)?` + "`" + `((?:messaging|redeliver)\.[^` + "`" + `]+)` + "`" + `(?:\*\*)? \| (\S+) \| ` + "`" + `([^` + "`" + `]+)` + "`" + ` \| ([^|]+) \|`)
	var readmeRows []tableRow
	for _, m := range cell.FindAllStringSubmatch(section, -1) {
		readmeRows = append(readmeRows, tableRow{m[1], m[2], m[3], strings.TrimSpace(m[4])})
	}
	if !slices.Equal(readmeRows, metricTable) {
		t.Errorf("README's metric table:\n%v\nwant\n%v", readmeRows, metricTable)
	}
	checkMentions(t, "README.md's Telemetry section", section)
}

// promNames returns the Prometheus series names of the table's metrics,
// as OpenTelemetry's Prometheus exporter names them (checked with
// go.opentelemetry.io/otel/exporters/prometheus v0.69.0): dots become
// underscores, a unit in braces is dropped, seconds add _seconds, a
// counter adds _total, a histogram is _bucket, _sum and _count; and the
// label names, the attributes' with underscores.
func promNames() (series map[string]string, labels map[string]bool) {
	series, labels = map[string]string{}, map[string]bool{"le": true}
	for _, r := range metricTable {
		base := strings.ReplaceAll(r.name, ".", "_")
		if r.unit == "s" {
			base += "_seconds"
		}
		switch r.instrument {
		case "counter":
			series[base+"_total"] = r.name
		case "histogram":
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				series[base+s] = r.name
			}
		default:
			series[base] = r.name
		}
	}
	for name := range vocabulary() {
		labels[strings.ReplaceAll(name, ".", "_")] = true
	}
	return series, labels
}

// The Grafana dashboard queries every metric of the table, under the
// names Prometheus gives them, and nothing else: no metric or label that
// rdotel does not export.
func TestDashboardMatchesMetricTable(t *testing.T) {
	var dash struct {
		Title      string
		UID        string
		Templating struct{ List []struct{ Name, Type string } }
		Panels     []struct {
			Title      string
			Datasource struct{ UID string }
			Targets    []struct {
				Expr       string
				Datasource struct{ UID string }
			}
		}
	}
	raw := readDoc(t, "../dashboard.json")
	if err := json.Unmarshal([]byte(raw), &dash); err != nil {
		t.Fatal(err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard.json: title %q, uid %q, %d panels: not a dashboard", dash.Title, dash.UID, len(dash.Panels))
	}
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"datasource", "group", "topic"} {
		if !vars[v] {
			t.Errorf("dashboard.json: no $%s variable", v)
		}
	}
	series, labels := promNames()
	used := map[string]bool{}
	token := regexp.MustCompile(`\b(?:messaging|redeliver|error)_[a-z_]+\b`)
	for _, p := range dash.Panels {
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: data source %q, %d queries; want ${datasource} and a query", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, q := range p.Targets {
			if q.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: a query on data source %q", p.Title, q.Datasource.UID)
			}
			for _, name := range token.FindAllString(q.Expr, -1) {
				switch {
				case series[name] != "":
					used[series[name]] = true
				case labels[name]:
				default:
					t.Errorf("panel %q queries %s, which rdotel does not export (as a series or a label):\n%s", p.Title, name, q.Expr)
				}
			}
		}
	}
	for _, r := range metricTable {
		if !used[r.name] {
			t.Errorf("no panel queries %s", r.name)
		}
	}
	checkMentions(t, "dashboard.json", raw)
}
