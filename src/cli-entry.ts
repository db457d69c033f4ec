/**
 * The `mcp-store` program's entry point: runs the command line and exits with its code once the
 * server has shut down. scripts/dev.mjs runs it from the sources; the `mcp-store` command and
 * `npm start` run its bundle (dist/mcp-store.mjs). `--version` alone is answered before the program
 * is loaded: in the bundle the program is a chunk of its own that this answer never reads.
 */
const argv = process.argv.slice(2)
if (argv.length === 1 && (argv[0] === "--version" || argv[0] === "-V")) {
  const { VERSION } = await import("./version.js")
  process.stdout.write(`${VERSION}\n`)
} else {
  const { main } = await import("./main.js")
  process.exitCode = await main(argv)
}
