/**
 * Search mode for large catalogs, measured (`npm run bench:tool-search`, `-- --write` to write its
 * section of bench/RESULTS.md): the recorded tools/list of 14 published MCP servers
 * (test/fixtures/tool-catalog, 259 tools) served by the catalog fixture over Streamable HTTP, all
 * registered in one real store in this process, and an SDK 1.x client on its `/mcp`. Side by side:
 *
 * - tokens (gpt-tokenizer, o200k_base) of the whole `tools/list` against search mode's first turn
 *   (its `tools/list`, then that plus one `search_tools` answer of 5 tools, averaged over the queries);
 * - `search_tools` latency p50/p99 through `/mcp` (one session, the query set in rounds) and of the
 *   index alone (`ToolSearchIndex.search`, in process);
 * - the index's memory: the heap a fresh index of the whole catalog holds (gc before and after);
 * - recall@1, @5 and MRR of bench/tool-search-queries.json (queries written for it, each with the
 *   tools that answer it).
 *
 * Nothing is downloaded; the run is bounded (a few thousand searches, a minute at most). Needs
 * `--expose-gc` (the npm script passes it).
 */
import { readFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { countTokens } from "gpt-tokenizer"
import { STORE_SCOPE } from "../src/domain/service-definition.js"
import { ScopeContext } from "../src/runtime/host.js"
import { ToolSearchIndex } from "../src/runtime/tool-search.js"
import { recordedCatalogs, startCatalogServer } from "../test/fixtures/catalog-server.js"
import { addService, waitStatus } from "../test/support/client.js"
import { startTestServer } from "../test/support/server.js"
import { writeMarkedSection } from "./report.js"

const ROOT = fileURLToPath(new URL("..", import.meta.url))
export const TOOL_SEARCH_START = "<!-- tool-search:start -->"
export const TOOL_SEARCH_END = "<!-- tool-search:end -->"

interface Query {
  readonly query: string
  readonly expect: ReadonlyArray<string>
}

const pct = (sorted: ReadonlyArray<number>, p: number): number => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!
const f = (n: number, digits = 2): string => n.toFixed(digits)

const { values } = parseArgs({ options: { write: { type: "boolean", default: false }, rounds: { type: "string", default: "20" } }, strict: true })
const rounds = Math.max(1, Math.min(200, Number(values.rounds)))
const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error("run with node --expose-gc (npm run bench:tool-search)")

const queries = (JSON.parse(readFileSync(join(ROOT, "bench", "tool-search-queries.json"), "utf8")) as { queries: ReadonlyArray<Query> }).queries
const catalogs = recordedCatalogs()
const started = Date.now()
const catalog = await startCatalogServer(catalogs)
const server = await startTestServer()
const clients: Client[] = []
try {
  await Promise.all(Object.keys(catalogs).map((name) => addService(server, "/for_store", { name, url: catalog.url(name) })))
  for (const name of Object.keys(catalogs)) await waitStatus(server, "/for_store", name, "healthy", 30)
  const connect = async (path: string) => {
    const client = new Client({ name: "tool-search-bench", version: "1.0.0" })
    await client.connect(new StreamableHTTPClientTransport(new URL(server.url + path)))
    clients.push(client)
    return client
  }
  const full = await connect("/mcp")
  const search = await connect("/mcp?tools=search")

  // Tokens: what a client puts in its model's context for the tools.
  const fullList = await full.listTools()
  const searchList = await search.listTools()
  const tokensOf = (value: unknown) => countTokens(JSON.stringify(value))
  const fullTokens = tokensOf(fullList.tools)
  const searchListTokens = tokensOf(searchList.tools)
  let answerTokens = 0
  const searchOnce = async (query: string, limit: number) => {
    const r = (await search.callTool({ name: "search_tools", arguments: { query, limit } })) as unknown as { structuredContent?: { tools: Array<{ name: string }> }; content: Array<{ text?: string }> }
    return r
  }
  for (const q of queries) answerTokens += countTokens((await searchOnce(q.query, 5)).content[0]!.text ?? "")
  const meanAnswerTokens = answerTokens / queries.length

  // Recall: through /mcp, as a client gets it.
  let at1 = 0
  let at5 = 0
  let rr = 0
  const misses: string[] = []
  for (const q of queries) {
    const names = (await searchOnce(q.query, 10)).structuredContent!.tools.map((t) => t.name)
    const rank = names.findIndex((n) => q.expect.includes(n))
    if (rank === 0) at1++
    if (rank >= 0 && rank < 5) at5++
    if (rank >= 0) rr += 1 / (rank + 1)
    if (rank < 0 || rank >= 5) misses.push(`"${q.query}" (wanted ${q.expect.join(" or ")}; got ${names.slice(0, 3).join(", ")})`)
  }

  // Latency through /mcp: the query set, in rounds, one call at a time, each search followed by a
  // plain tools/call of the same session (call_tool to everything__echo: one upstream round trip) as
  // the yardstick, so that the machine's load hits both alike.
  const overMcp: number[] = []
  const plainCalls: number[] = []
  const load = loadavg()
  for (let r = 0; r < rounds; r++) {
    for (const q of queries) {
      const t0 = performance.now()
      await searchOnce(q.query, 5)
      const t1 = performance.now()
      await search.callTool({ name: "call_tool", arguments: { name: "everything__echo", arguments: { message: q.query } } })
      plainCalls.push(performance.now() - t1)
      overMcp.push(t1 - t0)
    }
  }
  overMcp.sort((a, b) => a - b)
  plainCalls.sort((a, b) => a - b)

  // The index alone, and its memory: a fresh index of the whole catalog, built by its first query.
  const store = server.running.store
  const ctx = new ScopeContext(store.host, STORE_SCOPE)
  gc()
  const before = process.memoryUsage().heapUsed
  const fresh = new ToolSearchIndex(store.host)
  const t0 = performance.now()
  fresh.search(ctx, "warm", 1)
  const buildMs = performance.now() - t0
  gc()
  const heapBytes = process.memoryUsage().heapUsed - before
  const stats = fresh.stats()
  const alone: number[] = []
  for (let r = 0; r < rounds * 5; r++) {
    for (const q of queries) {
      const s = performance.now()
      fresh.search(ctx, q.query, 5)
      alone.push(performance.now() - s)
    }
  }
  alone.sort((a, b) => a - b)
  const catalogBytes = Buffer.byteLength(JSON.stringify(fullList.tools))

  const servers = Object.entries(catalogs)
    .map(([name, c]) => `${name} (${c.package}@${c.version}, ${c.tools.length})`)
    .join(", ")
  const section = [
    TOOL_SEARCH_START,
    "## Search mode for large catalogs (bench/tool-search.ts)",
    "",
    `\`npm run bench:tool-search\`, ${new Date().toISOString()}, Node ${process.version}, ${cpus().length} CPUs, load average (1 min) ${f(load[0]!)} when the latency rounds began (the machine is shared: ratios are steadier than absolute figures). One store in the bench process with ${fullList.tools.length} tools: the recorded \`tools/list\` of ${Object.keys(catalogs).length} published MCP servers ` +
      `(test/fixtures/tool-catalog: ${servers}), each served again by the catalog fixture over Streamable HTTP on 127.0.0.1. ` +
      `An SDK 1.x client on \`/mcp\` (the whole list) and on \`/mcp?tools=search\`. Tokens: gpt-tokenizer 4.0.0, o200k_base, of the JSON a client hands its model. ` +
      `Queries: bench/tool-search-queries.json (${queries.length} queries a user would ask, each with the tools that answer it).`,
    "",
    "| | whole list | search mode | ratio |",
    "|---|---:|---:|---:|",
    `| tools listed | ${fullList.tools.length} | ${searchList.tools.length} | |`,
    `| tokens of tools/list | ${fullTokens} | ${searchListTokens} | ${f(fullTokens / searchListTokens, 1)}x fewer |`,
    `| tokens of the first turn (tools/list + one search_tools answer of 5 tools, mean) | ${fullTokens} | ${f(searchListTokens + meanAnswerTokens, 0)} | ${f(fullTokens / (searchListTokens + meanAnswerTokens), 1)}x fewer |`,
    "",
    "| measure | value |",
    "|---|---:|",
    `| recall@1 | ${f((100 * at1) / queries.length, 1)} % (${at1}/${queries.length}) |`,
    `| recall@5 | ${f((100 * at5) / queries.length, 1)} % (${at5}/${queries.length}) |`,
    `| MRR (first 10) | ${f(rr / queries.length, 3)} |`,
    `| search_tools through /mcp (limit 5), p50 / p99 | ${f(pct(overMcp, 50))} / ${f(pct(overMcp, 99))} ms (${overMcp.length} calls) |`,
    `| beside it: call_tool of everything__echo through /mcp (an upstream round trip), p50 / p99 | ${f(pct(plainCalls, 50))} / ${f(pct(plainCalls, 99))} ms (search p50 ${f(pct(overMcp, 50) / pct(plainCalls, 50))}x of it) |`,
    `| the index alone (ToolSearchIndex.search, limit 5), p50 / p99 | ${f(pct(alone, 50), 3)} / ${f(pct(alone, 99), 3)} ms (${alone.length} queries) |`,
    `| index of the whole catalog: heap held | ${f(heapBytes / 1024 / 1024)} MiB (${stats.tools} tools, ${stats.terms} terms; the tools' JSON: ${f(catalogBytes / 1024)} KiB) |`,
    `| building it (first query) | ${f(buildMs, 1)} ms |`,
    "",
    misses.length === 0 ? "Every query found its tool in the first 5." : `Not in the first 5 (${misses.length}): ${misses.join("; ")}.`,
    TOOL_SEARCH_END
  ].join("\n")
  console.log(section)
  console.log(`\n(${((Date.now() - started) / 1000).toFixed(1)} s)`)
  if (values.write) writeMarkedSection(resolve(ROOT, "bench", "RESULTS.md"), TOOL_SEARCH_START, TOOL_SEARCH_END, section)
} finally {
  await Promise.all(clients.map((c) => c.close().catch(() => undefined)))
  await server.cleanup()
  await catalog.stop()
}
