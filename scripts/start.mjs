// `npm start`: the built program (dist/mcp-store.mjs, made by `npm ci` through `prepare`, or by
// `npm run build`) on ./mcp.json. The demo's services file is not part of the repository: on the
// first start it is created from mcp.example.json, so following the README's demo (which adds and
// removes services) changes no tracked file. With --config, --standalone-config or their
// environment variables the file is the user's and nothing is created.
import { constants, copyFileSync, existsSync } from "node:fs"

const args = process.argv.slice(2)
const chosen =
  args.some((a) => /^--(config|standalone-config)(=|$)/.test(a)) ||
  ["MCPSTORE_CONFIG", "MCPSTORE_MCP_CONFIG_FILE", "MCPSTORE_STANDALONE_CONFIG"].some((name) => (process.env[name] ?? "") !== "")
if (!chosen && !existsSync("mcp.json") && existsSync("mcp.example.json")) {
  try {
    copyFileSync("mcp.example.json", "mcp.json", constants.COPYFILE_EXCL)
    // One line in the store's own text log format (src/logging/log.ts), on stderr as its lines are.
    process.stderr.write(`${new Date().toISOString()} INFO  created mcp.json from mcp.example.json (first start: the demo's services file, not tracked by git)\n`)
  } catch (e) {
    if (e.code !== "EEXIST") throw e
  }
}
// The program reads process.argv itself: `node scripts/start.mjs run api ...` is `mcp-store run api ...`.
const program = new URL("../dist/mcp-store.mjs", import.meta.url)
if (!existsSync(program)) {
  process.stderr.write("mcp-store: dist/ is not built (npm ci builds it; or run npm run build)\n")
  process.exit(1)
}
await import(program.href)
