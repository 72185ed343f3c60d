package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// File is one rule file's name and contents.
type File struct {
	Name string
	Data []byte
	// Root, if set, is the document already built as YAML nodes, as a
	// program that renders rules from another form builds it: Parse
	// reads Root and not Data, and Data is then only what the checksum
	// covers (the source's bytes). Building nodes directly skips writing
	// YAML text and reading it back, which for a large document costs
	// many times the document in memory (yaml.v3's encoder keeps every
	// event of a document until it ends). Parse reads a Root once: if it
	// has no aliases, Parse drops each descriptor's nodes from it once
	// they are read, so that they and the rules made from them are not
	// all held at once.
	Root *yaml.Node
}

// Options changes how rule files combine.
type Options struct {
	// MergeDomains lets several files add rules to one domain, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does. Without it a domain
	// may appear in one file only.
	MergeDomains bool
	// AllowEmpty lets Load and a Reloader accept a config that defines no
	// domain, so that every request gets OK. Without it such a config is
	// ErrNoRules: a deleted ConfigMap key or a wrong mount must not switch
	// every limit off.
	AllowEmpty bool
	// CalendarMonths makes every fixed window limit of one month that
	// sets no calendar of its own a UTC calendar month, as
	// envoyproxy/ratelimit's USE_CALENDAR_MONTH_RATE_LIMIT does.
	CalendarMonths bool
}

// ErrNoRules is the error of Load, and of a Reloader's reload, when the
// config path holds no rule: no *.yaml or *.yml file outside dot-files
// and dot-directories. (Every rule file that parses defines a domain, so
// that is the same as no domain.) Options.AllowEmpty accepts it.
var ErrNoRules = errors.New("no rule files found")

// Load reads rules from path: a YAML file, or a directory whose *.yaml and
// *.yml files (in subdirectories too) are read in lexical order. Names that
// start with a dot are skipped, files and directories alike, so a
// Kubernetes ConfigMap mount (whose real files sit in ..data) is read once,
// through its top-level links. Symbolic links to files are followed.
//
// The error lists every problem found; each is an *Error (or an I/O
// error): Problems lists them. A path that holds no rule is ErrNoRules,
// unless opts.AllowEmpty is set.
func Load(path string, opts Options) (*limits.Ruleset, error) {
	files, err := ReadFiles(path)
	if err != nil {
		return nil, err
	}
	rs, err := Parse(files, opts)
	if err != nil {
		return nil, err
	}
	if err := requireRules(path, rs, opts); err != nil {
		return nil, err
	}
	return rs, nil
}

// requireRules returns ErrNoRules, naming path, if rs defines no domain
// and opts does not allow that.
func requireRules(path string, rs *limits.Ruleset, opts Options) error {
	if opts.AllowEmpty || len(rs.Domains()) > 0 {
		return nil
	}
	return fmt.Errorf("config %s: %w (want *.yaml or *.yml files; names that start with a dot are skipped)", path, ErrNoRules)
}

// ReadFiles reads the rule files Load would read, without parsing them.
func ReadFiles(path string) ([]File, error) { return readFiles(path, os.ReadFile) }

// readFiles is ReadFiles reading each file with readFile.
func readFiles(path string, readFile func(string) ([]byte, error)) ([]File, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if !info.IsDir() {
		data, err := readFile(path)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
		return []File{{Name: path, Data: data}}, nil
	}
	var files []File
	err = walkConfig(path, func(p string, d fs.DirEntry) error {
		if d.IsDir() {
			return nil
		}
		ext := filepath.Ext(d.Name())
		if ext != ".yaml" && ext != ".yml" {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// Follow links to files (ConfigMap mounts are made of them),
			// never to directories.
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		data, err := readFile(p)
		if err != nil {
			return err
		}
		files = append(files, File{Name: p, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return files, nil
}

// Parse compiles rule files into a Ruleset. Like Load, it reports every
// problem it finds, not only the first. It accepts an empty file set: only
// Load and a Reloader, which know the path, refuse one (ErrNoRules).
func Parse(files []File, opts Options) (*limits.Ruleset, error) {
	return parse(files, opts, false)
}

// parse is Parse; generated leaves out line numbers (see ParseGenerated).
func parse(files []File, opts Options, generated bool) (*limits.Ruleset, error) {
	var (
		domains []*limits.Domain
		byName  = map[string]*limits.Domain{}
		levels  = map[*[]*limits.Rule]map[[2]string]*limits.Rule{}
		names   []string
		errs    []error
	)
	for _, f := range files {
		names = append(names, f.Name)
		p := &parser{file: f.Name, domains: byName, levels: levels, opts: opts, generated: generated}
		if d := p.parseFile(f); d != nil {
			domains = append(domains, d)
		}
		errs = append(errs, p.errs...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(listed(errs)...)
	}
	return limits.NewRuleset(domains, names, checksum(files)), nil
}

// walkConfig walks the config directory path, following path itself when
// it is a link to a directory (as a mounted volume often is), and calls fn
// for every file and directory except path and those whose names start
// with a dot: dot-directories, such as a ConfigMap's ..data, are not
// entered. Load and the reload watcher both walk with it, so they always
// agree on what the config is.
func walkConfig(path string, fn func(p string, d fs.DirEntry) error) error {
	// A trailing separator makes WalkDir follow a link at the root.
	root := path
	if !strings.HasSuffix(root, string(filepath.Separator)) {
		root += string(filepath.Separator)
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case p == root:
			return nil
		case strings.HasPrefix(d.Name(), "."):
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		return fn(p, d)
	})
}
