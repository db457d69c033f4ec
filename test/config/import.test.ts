// `mcp-store import <file>`: another client's config file merged into the services file, each
// entry reported (added, replaced, already there, skipped with why, renamed to follow the name
// rule); clashes skipped unless --overwrite; --dry-run writes nothing; the write is atomic and a
// server running with --reload on the services file loads the imported services.
import { existsSync } from "node:fs"
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { runImport } from "../../src/cli/import-command.js"
import { main } from "../../src/main.js"
import { STORE_SCOPE } from "../../src/domain/service-definition.js"
import { statusOf } from "../../src/machines/service.js"
import { awaitSnapshotPromise as awaitSnapshot } from "../../src/runtime/bridge.js"
import { createStore } from "../../src/composition/layer-graph.js"
import type { Store } from "../../src/runtime/store.js"
import { stdioFixture } from "../fixtures/paths.js"
import { eventually, FAST_MONITORING } from "../support/index.js"

let dir: string
let store: Store | undefined
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "mcp-store-import-"))
})
afterEach(async () => {
  await store?.stop()
  store = undefined
  await rm(dir, { recursive: true, force: true })
})

/** Runs `mcp-store import ...args` in `dir`; resolves with the exit code and what it printed. */
const run = async (...args: string[]) => {
  let out = ""
  let err = ""
  const code = await runImport(args, {}, { cwd: dir, writeOut: (t) => void (out += t), writeErr: (t) => void (err += t) })
  return { code, out, err }
}

const launch = stdioFixture()

/** A Claude Desktop file with two usable servers, one invalid and one whose name has a space. */
const claude = {
  mcpServers: {
    files: { command: launch.command, args: launch.args, env: { ROOT: "/tmp" } },
    weather: { url: "http://127.0.0.1:9/mcp" },
    broken: { command: launch.command, args: 5 },
    "Brave Search": { command: launch.command, args: launch.args }
  }
}

describe("mcp-store import", { timeout: 30_000 }, () => {
  it("into a new services file: takes the usable entries, renames one to follow the name rule, skips the invalid one with why", async () => {
    await writeFile(join(dir, "claude_desktop_config.json"), JSON.stringify(claude))
    const { code, out } = await run("claude_desktop_config.json")
    expect(code).toBe(0)
    expect(out).toMatch(/^added +files$/m)
    expect(out).toMatch(/^added +weather$/m)
    expect(out).toMatch(/^added +Brave-Search: renamed from "Brave Search"/m)
    expect(out).toMatch(/^skipped +broken: "args" /m)
    expect(out).toMatch(/took 3 services from .*claude_desktop_config\.json into .*mcp\.json \(3 added, 0 replaced, 0 already there, 1 skipped\)/)
    const written = JSON.parse(await readFile(join(dir, "mcp.json"), "utf8"))
    expect(written).toEqual({
      mcpServers: { files: claude.mcpServers.files, weather: claude.mcpServers.weather, "Brave-Search": claude.mcpServers["Brave Search"] }
    })
    expect((await stat(join(dir, "mcp.json"))).mode & 0o777).toBe(0o600)
    expect((await readdir(dir)).filter((n) => n.endsWith(".tmp"))).toEqual([])
  })

  it("keeps the Gemini CLI's includeTools / excludeTools of an entry; skips one whose list is not a list of globs", async () => {
    const gemini = {
      mcpServers: {
        narrow: { command: launch.command, args: launch.args, includeTools: ["echo", "add*"], excludeTools: ["add_tool"] },
        bad: { command: launch.command, args: launch.args, excludeTools: "echo" }
      }
    }
    await writeFile(join(dir, "settings.json"), JSON.stringify(gemini))
    const { code, out } = await run("settings.json")
    expect(code).toBe(0)
    expect(out).toMatch(/^added +narrow$/m)
    expect(out).toMatch(/^skipped +bad: "excludeTools" /m)
    const written = JSON.parse(await readFile(join(dir, "mcp.json"), "utf8"))
    expect(written.mcpServers).toEqual({ narrow: gemini.mcpServers.narrow })
  })

  it("skips a name clash with a clear line, replaces it with --overwrite, and reports an equal one as already there", async () => {
    await writeFile(join(dir, "mcp.json"), JSON.stringify({ mcpServers: { weather: { url: "http://127.0.0.1:8/mcp" }, files: claude.mcpServers.files }, note: "mine" }))
    await writeFile(join(dir, "other.json"), JSON.stringify(claude))
    const first = await run("other.json")
    expect(first.code).toBe(0)
    expect(first.out).toMatch(/^skipped +weather: a service of that name is already in the services file \(--overwrite replaces it\)$/m)
    expect(first.out).toMatch(/^same +files: already there with the same definition$/m)
    let written = JSON.parse(await readFile(join(dir, "mcp.json"), "utf8"))
    expect(written.mcpServers.weather).toEqual({ url: "http://127.0.0.1:8/mcp" })
    expect(written.note).toBe("mine")

    const second = await run("other.json", "--overwrite")
    expect(second.out).toMatch(/^replaced +weather$/m)
    written = JSON.parse(await readFile(join(dir, "mcp.json"), "utf8"))
    expect(written.mcpServers.weather).toEqual({ url: "http://127.0.0.1:9/mcp" })
  })

  it("renames within a scope: a valid name in another section keeps it, and another scope's entry is not reported renamed", async () => {
    const A = { url: "http://127.0.0.1:9/a" }
    const B = { url: "http://127.0.0.1:9/b" }
    const C = { url: "http://127.0.0.1:9/c" }
    await writeFile(
      join(dir, "other.json"),
      JSON.stringify({ mcpServers: { "Brave Search": A }, servers: { "Brave-Search": B }, agents: { a1: { mcpServers: { "Brave Search": C } } } })
    )
    const { code, out } = await run("other.json")
    expect(code, out).toBe(0)
    expect(out).toMatch(/^added +Brave-Search$/m)
    expect(out).toMatch(/^added +Brave-Search-2: renamed from "Brave Search"/m)
    expect(out).toMatch(/^added +a1\/Brave-Search: renamed from "Brave Search"/m)
    expect(out).not.toMatch(/defined twice/)
    const written = JSON.parse(await readFile(join(dir, "mcp.json"), "utf8"))
    expect(written.mcpServers["Brave-Search"]).toEqual(B)
    expect(written.mcpServers["Brave-Search-2"]).toEqual(A)
    expect(written.agents.a1.mcpServers["Brave-Search"]).toEqual(C)

    // A store service whose name was valid is not reported renamed because an agent's was.
    await writeFile(join(dir, "more.json"), JSON.stringify({ mcpServers: { "Brave-Search": B }, agents: { a2: { mcpServers: { "Brave Search": C } } } }))
    const more = await run("more.json", "--dry-run", "--config", "fresh.json")
    expect(more.out).toMatch(/^added +Brave-Search$/m)
    expect(more.out).toMatch(/^added +a2\/Brave-Search: renamed from "Brave Search"/m)
  })

  it("--dry-run prints the same report and writes nothing (no file created, an existing one untouched)", async () => {
    await writeFile(join(dir, "other.json"), JSON.stringify(claude))
    const dry = await run("other.json", "--dry-run", "--config", "services.json")
    expect(dry.code).toBe(0)
    expect(dry.out).toMatch(/dry run: would take 3 services .* nothing written/)
    expect(existsSync(join(dir, "services.json"))).toBe(false)

    await writeFile(join(dir, "services.json"), '{"mcpServers": {"weather": {"url": "http://127.0.0.1:8/mcp"}}}')
    const before = await stat(join(dir, "services.json"))
    const again = await run("other.json", "--dry-run", "--config", "services.json")
    expect(again.out).toMatch(/^skipped +weather: /m)
    expect(again.out).toMatch(/would take 2 services/)
    expect((await stat(join(dir, "services.json"))).mtimeMs).toBe(before.mtimeMs)
  })

  it("reads a VS Code file with comments into the services file's own layout", async () => {
    await writeFile(
      join(dir, "vscode.json"),
      '// workspace servers\n{\n  "servers": {\n    "fixture": { "type": "stdio", "command": "node", "args": ["server.js"], },\n    "api": { "type": "http", "url": "http://127.0.0.1:9/mcp" },\n  },\n}\n'
    )
    const { code, out } = await run("vscode.json")
    expect(code).toBe(0)
    expect(out).toMatch(/took 2 services/)
    expect(JSON.parse(await readFile(join(dir, "mcp.json"), "utf8"))).toEqual({
      mcpServers: { fixture: { type: "stdio", command: "node", args: ["server.js"] }, api: { type: "http", url: "http://127.0.0.1:9/mcp" } }
    })
  })

  it("refuses what it cannot read, with the path, and a usage error, writing nothing", async () => {
    expect((await run("missing.json")).err).toMatch(/missing\.json: cannot be read/)
    await writeFile(join(dir, "bad.json"), '{"mcpServers": ')
    const bad = await run("bad.json")
    expect(bad.code).toBe(1)
    expect(bad.err).toMatch(/bad\.json: not valid JSON/)
    expect((await run()).code).toBe(2)
    // An empty --config would name the directory itself.
    const empty = await run("bad.json", "--config=")
    expect(empty.code).toBe(2)
    expect(empty.err).toMatch(/--config must be the path of a file/)
    expect((await run("--help")).code).toBe(0)
    expect((await run("mcp.json")).err).toMatch(/is the services file itself/)
    expect(existsSync(join(dir, "mcp.json"))).toBe(false)
  })

  it("is what `mcp-store import` runs", async () => {
    const cwd = process.cwd()
    await writeFile(join(dir, "other.json"), JSON.stringify({ mcpServers: { weather: claude.mcpServers.weather } }))
    try {
      process.chdir(dir)
      expect(await main(["import", "other.json", "--dry-run"])).toBe(0)
    } finally {
      process.chdir(cwd)
    }
  })

  it("a server running with --reload on the services file loads the imported services", async () => {
    const file = join(dir, "mcp.json")
    await writeFile(file, '{"mcpServers": {}}\n')
    store = await createStore({ mcpConfigFile: file, monitoring: FAST_MONITORING })
    store.watchFile()
    await writeFile(join(dir, "cursor.json"), JSON.stringify({ mcpServers: { files: claude.mcpServers.files } }))
    expect((await run("cursor.json")).code).toBe(0)
    expect(await eventually(() => store!.serviceActor(STORE_SCOPE, "files") !== undefined, 5_000)).toBe(true)
    const reached = await awaitSnapshot(store.serviceActor(STORE_SCOPE, "files")!, (s) => statusOf(s) === "healthy", { timeoutMs: 10_000 })
    expect(reached.end).toBe("reached")
  })
})
