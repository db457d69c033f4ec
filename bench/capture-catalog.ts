/**
 * Records the `tools/list` of published MCP servers as the fixtures of the tool-search bench and
 * tests (test/fixtures/tool-catalog/*.json). Run by hand, never by the bench or the tests, against servers
 * installed in a folder outside the repository:
 *
 *   mkdir /tmp/catalog && cd /tmp/catalog && npm install --ignore-scripts <the packages of SERVERS>
 *   npx tsx bench/capture-catalog.ts /tmp/catalog
 *
 * Each server runs over stdio with no credentials (those that need some to list their tools are
 * given a placeholder that is never used: listing sends nothing upstream).
 */
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"

/** One server to record: its package, the bin it runs, its arguments and environment. */
interface Source {
  readonly file: string
  readonly pkg: string
  readonly bin: string
  readonly args?: ReadonlyArray<string>
  readonly env?: Record<string, string>
}

const SERVERS: ReadonlyArray<Source> = [
  { file: "everything", pkg: "@modelcontextprotocol/server-everything", bin: "mcp-server-everything", args: ["stdio"] },
  { file: "filesystem", pkg: "@modelcontextprotocol/server-filesystem", bin: "mcp-server-filesystem", args: ["/tmp"] },
  { file: "memory", pkg: "@modelcontextprotocol/server-memory", bin: "mcp-server-memory" },
  { file: "sequential-thinking", pkg: "@modelcontextprotocol/server-sequential-thinking", bin: "mcp-server-sequential-thinking" },
  { file: "github", pkg: "@modelcontextprotocol/server-github", bin: "mcp-server-github", env: { GITHUB_PERSONAL_ACCESS_TOKEN: "placeholder" } },
  { file: "gitlab", pkg: "@modelcontextprotocol/server-gitlab", bin: "mcp-server-gitlab", env: { GITLAB_PERSONAL_ACCESS_TOKEN: "placeholder" } },
  { file: "slack", pkg: "@modelcontextprotocol/server-slack", bin: "mcp-server-slack", env: { SLACK_BOT_TOKEN: "placeholder", SLACK_TEAM_ID: "T0" } },
  { file: "puppeteer", pkg: "@modelcontextprotocol/server-puppeteer", bin: "mcp-server-puppeteer" },
  { file: "playwright", pkg: "@playwright/mcp", bin: "playwright-mcp", args: ["--caps=vision,pdf,testing,tracing"] },
  { file: "chrome-devtools", pkg: "chrome-devtools-mcp", bin: "chrome-devtools-mcp" },
  { file: "notion", pkg: "@notionhq/notion-mcp-server", bin: "notion-mcp-server" },
  { file: "desktop-commander", pkg: "@wonderwhy-er/desktop-commander", bin: "desktop-commander" },
  { file: "circleci", pkg: "@circleci/mcp-server-circleci", bin: "mcp-server-circleci", env: { CIRCLECI_TOKEN: "placeholder" } },
  { file: "chart", pkg: "@antv/mcp-server-chart", bin: "mcp-server-chart" }
]

const folder = process.argv[2]
if (folder === undefined) {
  console.error("usage: tsx bench/capture-catalog.ts <folder where the servers are installed>")
  process.exit(2)
}
const only = process.argv.slice(3)

for (const s of SERVERS) {
  if (only.length > 0 && !only.includes(s.file)) continue
  const version = (JSON.parse(readFileSync(join(folder, "node_modules", s.pkg, "package.json"), "utf8")) as { version: string }).version
  const transport = new StdioClientTransport({
    command: join(folder, "node_modules", ".bin", s.bin),
    args: [...(s.args ?? [])],
    env: { PATH: process.env["PATH"] ?? "", HOME: "/tmp/catalog-home", ...s.env },
    stderr: "ignore"
  })
  const client = new Client({ name: "mcp-store-catalog-capture", version: "1" })
  try {
    await client.connect(transport, { timeout: 60_000 })
    const tools = []
    let cursor: string | undefined
    do {
      const page = await client.listTools(cursor === undefined ? {} : { cursor }, { timeout: 60_000 })
      tools.push(...page.tools)
      cursor = page.nextCursor
    } while (cursor !== undefined)
    const doc = { source: `npm ${s.pkg}@${version}, tools/list over stdio (${s.bin}${s.args ? ` ${s.args.join(" ")}` : ""})`, package: s.pkg, version, tools }
    writeFileSync(join(import.meta.dirname, "..", "test", "fixtures", "tool-catalog", `${s.file}.json`), `${JSON.stringify(doc, null, 1)}\n`)
    console.log(`${s.file}: ${tools.length} tools (${s.pkg}@${version})`)
  } catch (e) {
    console.log(`${s.file}: failed: ${e instanceof Error ? e.message : String(e)}`)
  } finally {
    await client.close().catch(() => undefined)
  }
}
