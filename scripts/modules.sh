# Sourced by the release scripts: the repository's modules by role.
#
# PUBLIC_MODULES are the modules a user installs by path (each is tagged
# at every release, as <dir>/vX.Y.Z, the root as vX.Y.Z); every other
# module (examples, tests, benchmarks, tools) is for development only and
# is never published. The module path of a directory is
# github.com/redeliver-go/redeliver/<dir>.
MODULE_ROOT=github.com/redeliver-go/redeliver
PUBLIC_MODULES=(
  .
  adapters/confluent
  adapters/confluent/confluenthost
  adapters/eventhubs
  adapters/franz
  adapters/franz/franzhost
  adapters/kafkago
  adapters/kafkago/kafkagohost
  adapters/sarama
  adapters/sarama/saramahost
  cmd/redeliver
  host
  rdotel
  redrive/pgstore
  redrive/sqlitestore
)

# module_path DIR: the module path of a module directory.
module_path() { if [ "$1" = . ]; then echo "$MODULE_ROOT"; else echo "$MODULE_ROOT/$1"; fi; }

# module_tag DIR VERSION: the tag a release gives the module.
module_tag() { if [ "$1" = . ]; then echo "$2"; else echo "$1/$2"; fi; }

# all_modules: every module directory of the repository, root first.
all_modules() {
  if git rev-parse --git-dir >/dev/null 2>&1; then
    git ls-files 'go.mod' '*/go.mod'
  else
    find . -name go.mod -not -path '*/testdata/*' | sed 's|^\./||'
  fi | xargs -n1 dirname | sort
}
