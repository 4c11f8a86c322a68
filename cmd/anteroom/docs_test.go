package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// settingsByKey is the settings table as key → environment variable.
func settingsByKey(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, s := range settings {
		_, dup := out[s.key]
		require.False(t, dup, "settings lists %q twice", s.key)
		out[s.key] = s.env
		require.True(t, (s.apply == nil) != (s.applyGate == nil), "%s: exactly one of apply and applyGate", s.key)
		require.Equal(t, s.applyGate != nil, strings.HasPrefix(s.key, "gates.<name>."), "%s: gate keys apply to a gate", s.key)
	}
	return out
}

// configKeys lists the YAML keys of type t as dotted paths, a map's keys as
// <name>, from the struct tags: what the file can hold.
func configKeys(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType:
	case t.Kind() == reflect.Struct:
		var out []string
		for _, k := range yamlKeys(t) {
			f, _ := fieldByYAMLKey(t, k)
			out = append(out, configKeys(f.Type, prefix+k+".")...)
		}
		return out
	case t.Kind() == reflect.Map:
		return configKeys(t.Elem(), prefix+"<name>.")
	}
	return []string{strings.TrimSuffix(prefix, ".")}
}

// The one table of settings covers every key the file can hold, and its
// environment variables are the keys spelt the one way.
func TestSettingsCoverEveryConfigKey(t *testing.T) {
	table := settingsByKey(t)
	assert.ElementsMatch(t, configKeys(configType, ""), keysOf(table))
	for key, env := range table {
		want := "ANTEROOM_" + strings.ToUpper(strings.NewReplacer(".", "_").Replace(key))
		assert.Equal(t, want, env, "%s", key)
	}
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The README's configuration table lists exactly the settings, each with
// its environment variable.
func TestREADMEListsEverySetting(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(data), "\n## Configuration\n")
	require.True(t, ok, "README has a Configuration section")
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\| `([^`]+)` \\|")
	got := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		_, dup := got[m[1]]
		assert.False(t, dup, "README lists %q twice", m[1])
		got[m[1]] = m[2]
	}
	assert.Equal(t, settingsByKey(t), got)
	// No second list of variables to drift: every ANTEROOM_ name in the
	// section is in the table, but for the prose's two examples.
	known := map[string]bool{"ANTEROOM_GATES_<NAME>": true, "ANTEROOM_PORT": true}
	for _, env := range got {
		known[env] = true
	}
	for _, name := range regexp.MustCompile(`ANTEROOM_[A-Z0-9_<>]*[A-Z0-9>]`).FindAllString(section, -1) {
		assert.True(t, known[name], "README's Configuration names %s, which is not a setting", name)
	}
}

// config.example.yaml holds every setting, each under a comment naming its
// environment variable, and nothing else.
func TestExampleConfigListsEverySetting(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config.example.yaml"))
	require.NoError(t, err)
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal(data, &doc))
	got := map[string]string{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			name := k.Value
			if prefix == "gates." {
				name = "<name>"
			}
			if v.Kind == yaml.MappingNode {
				walk(v, prefix+name+".")
				continue
			}
			lines := strings.Split(strings.TrimSpace(k.HeadComment), "\n")
			got[prefix+name] = strings.TrimPrefix(lines[len(lines)-1], "# ")
		}
	}
	walk(doc.Content[0], "")
	assert.Equal(t, settingsByKey(t), got, "each key of config.example.yaml has its variable as the last line of the comment above it")
}
