package redisauth

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// File is the credentials of a Redis user held in files: a user name, a
// password, or both, each from its file if it has one, else fixed. It is
// a redis.Credentials.
type File struct {
	username, password string
	user, pass         *Secret // nil: username, password
}

// NewFile returns the credentials of the user named in userFile, or
// username if userFile is nil, with the password in passFile, or
// password if passFile is nil.
func NewFile(username string, userFile *Secret, password string, passFile *Secret) *File {
	return &File{username: username, user: userFile, password: password, pass: passFile}
}

// Credentials returns the user name and password the files hold now.
func (f *File) Credentials(context.Context) (username, password string, err error) {
	username, password = f.username, f.password
	if f.user != nil {
		username = f.user.Value()
	}
	if f.pass != nil {
		password = f.pass.Value()
	}
	return username, password, nil
}

// Watch watches every file of f until ctx ends (Secret.Watch).
func (f *File) Watch(ctx context.Context) error {
	var g errgroup.Group
	for _, s := range f.Secrets() {
		g.Go(func() error { return s.Watch(ctx) })
	}
	return g.Wait()
}

// Secrets returns f's files: the password's, then the user name's, each
// if it has one.
func (f *File) Secrets() []*Secret {
	var ss []*Secret
	for _, s := range []*Secret{f.pass, f.user} {
		if s != nil {
			ss = append(ss, s)
		}
	}
	return ss
}
