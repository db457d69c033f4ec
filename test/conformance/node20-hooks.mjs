/**
 * Lets the MCP conformance suite (@modelcontextprotocol/conformance, a dev dependency) run on
 * Node 20: its bundle imports `globSync` from "fs", which Node 20 lacks (it only uses it to
 * gather result files, never in the `server` scenarios run here). Registered with
 * `node --import ./test/conformance/node20-hooks.mjs`; on Node 22 and later it changes nothing.
 */
import { register } from "node:module"
import * as fs from "node:fs"

if (typeof fs.globSync !== "function") {
  register(
    "data:text/javascript," +
      encodeURIComponent(`
        export async function load(url, context, next) {
          const result = await next(url, context)
          if (!url.includes("/@modelcontextprotocol/conformance/dist/")) return result
          const source = String(result.source).replace("globSync as o,", "")
          if (source === String(result.source)) return result
          const shim = "const o = () => { throw new Error('globSync needs Node 22'); };"
          return { ...result, source: source.replace(/^(import[^;]*;)+/, (imports) => imports + shim) }
        }
      `),
    import.meta.url
  )
}
