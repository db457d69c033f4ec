/**
 * A minimal stdio MCP server for benchmarks: reads newline-delimited JSON-RPC on stdin and answers
 * each message at once, in one era picked by a flag. It exists because the SDK fixtures spend very
 * different CPU per request (test/fixtures/stdio-fixture.ts on SDK 1.x, test/fixtures/era-stdio.ts on
 * SDK v2's `serveStdio`), and on a 2-core machine a caller's writes to a busier child cost the caller
 * more: the store's own cost per era is only comparable against upstreams that cost the same, and
 * little. Both eras here are the same loop (one JSON.parse and one JSON.stringify per message, one
 * write per answer); what differs is what each era puts on the wire, as a real server of it does.
 *
 *   node --import tsx bench/raw-upstream.ts [--era 2025|2026-07-28]
 *
 * 2025: `initialize` (answers the offered revision), `notifications/initialized`, `ping`,
 * `tools/list`, `tools/call echo`; anything else is -32601 (so `server/discover`, the store's era
 * probe, says "a 2025 server", as SDK 1.x answers it).
 * 2026-07-28: `server/discover` (supportedVersions ["2026-07-28"], capabilities, the server's identity
 * in `_meta`, resultType "complete"), `tools/list` and `tools/call echo` with `resultType: "complete"`
 * and the identity in `_meta` as SDK v2's servers write them (the discovery and the list with SDK v2's
 * default freshness, `ttlMs: 0` and `cacheScope: "private"`), `subscriptions/listen` kept open (its
 * acknowledgement notification sent); `initialize` is refused with -32022 as a modern-only server does.
 * Notifications (`notifications/cancelled`, ...) are read and dropped.
 */
import { parseArgs } from "node:util"

const { values } = parseArgs({ options: { era: { type: "string", default: "2025" } }, strict: true })
const modern = values.era === "2026-07-28"
if (!modern && values.era !== "2025") throw new Error(`--era: 2025 or 2026-07-28, not ${values.era}`)

const SERVER_INFO = { name: "raw-upstream", version: "1.0.0" }
const META = { "io.modelcontextprotocol/serverInfo": SERVER_INFO }
const SCHEMA = { type: "object", properties: { text: { type: "string" } }, required: ["text"] }
const TOOLS = [{ name: "echo", description: "Echoes the text", inputSchema: SCHEMA }]
const CAPABILITIES = { tools: { listChanged: true } }
/** What SDK v2's servers say of a list's freshness by default ("stale at once"; its Client requires both). */
const FRESHNESS = { ttlMs: 0, cacheScope: "private" }
const VERSIONS_2025 = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]

type Id = string | number
interface Message {
  readonly id?: Id
  readonly method?: string
  readonly params?: { readonly name?: string; readonly arguments?: { readonly text?: unknown }; readonly protocolVersion?: string; readonly notifications?: unknown }
}

const write = (message: unknown): void => void process.stdout.write(`${JSON.stringify(message)}\n`)
const result = (id: Id, value: unknown): void => write({ jsonrpc: "2.0", id, result: value })
const error = (id: Id, code: number, message: string, data?: unknown): void =>
  write({ jsonrpc: "2.0", id, error: data === undefined ? { code, message } : { code, message, data } })
const complete = (value: Record<string, unknown>): Record<string, unknown> => ({ ...value, resultType: "complete", _meta: META })

const call = (id: Id, params: Message["params"]): void => {
  if (params?.name !== "echo") return error(id, -32602, `Unknown tool: ${String(params?.name)}`)
  const content = [{ type: "text", text: String(params.arguments?.text ?? "") }]
  result(id, modern ? complete({ content }) : { content })
}

const answer2025 = (m: Message, id: Id): void => {
  switch (m.method) {
    case "initialize": {
      const offered = m.params?.protocolVersion
      const protocolVersion = offered !== undefined && VERSIONS_2025.includes(offered) ? offered : VERSIONS_2025[0]
      return result(id, { protocolVersion, capabilities: CAPABILITIES, serverInfo: SERVER_INFO })
    }
    case "ping":
      return result(id, {})
    case "tools/list":
      return result(id, { tools: TOOLS })
    case "tools/call":
      return call(id, m.params)
    default:
      return error(id, -32601, "Method not found")
  }
}

const answerModern = (m: Message, id: Id): void => {
  switch (m.method) {
    case "server/discover":
      return result(id, complete({ supportedVersions: ["2026-07-28"], capabilities: CAPABILITIES, ...FRESHNESS }))
    case "initialize":
      return error(id, -32022, "Unsupported protocol version", { supported: ["2026-07-28"] })
    case "tools/list":
      return result(id, complete({ tools: TOOLS, ...FRESHNESS }))
    case "tools/call":
      return call(id, m.params)
    case "subscriptions/listen":
      // Kept open: no answer until the client cancels it or the process ends.
      return write({
        jsonrpc: "2.0",
        method: "notifications/subscriptions/acknowledged",
        params: { notifications: m.params?.notifications ?? {}, _meta: { "io.modelcontextprotocol/subscriptionId": id } }
      })
    default:
      return error(id, -32601, "Method not found")
  }
}

const answer = modern ? answerModern : answer2025

let buffer = ""
process.stdin.setEncoding("utf8")
process.stdin.on("data", (chunk: string) => {
  buffer += chunk
  let start = 0
  for (let end = buffer.indexOf("\n", start); end >= 0; end = buffer.indexOf("\n", start)) {
    const line = buffer.slice(start, end)
    start = end + 1
    if (line.trim() === "") continue
    let m: Message
    try {
      m = JSON.parse(line) as Message
    } catch {
      write({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error" } })
      continue
    }
    // Notifications and answers to requests of ours (none are sent): nothing to answer.
    if (m.id === undefined || m.method === undefined) continue
    answer(m, m.id)
  }
  buffer = buffer.slice(start)
})
process.stdin.on("end", () => process.exit(0))
