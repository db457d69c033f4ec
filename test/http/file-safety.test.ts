// The files the store writes hold secrets (env and header values, call arguments and results):
// through the running server, mcp.json, its backups and the tool-records file are 0600, the backup
// of reset_mcp_json_file never overwrites a file nor follows a symlink planted at `mcp.json.bak`,
// and a symlink planted at the records path is refused (logged), never followed. In each case the
// victim of the symlink is left byte-for-byte as it was.
import { chmodSync, existsSync, lstatSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterEach, describe, expect, it, onTestFinished, vi } from "vitest"
import { captureLogs } from "../../src/logging/log.js"
import { fixtureService, freshDir, startTestServer, type TestServer } from "../support/index.js"

/** The records file of the services file mcp.json (recordsFileFor). */
const RECORDS_FILE = "mcp.records.jsonl"

const modeOf = (path: string) => statSync(path).mode & 0o777

describe("files the store writes", { timeout: 20_000 }, () => {
  let server: TestServer | undefined
  let victimDir: string | undefined
  afterEach(async () => {
    vi.restoreAllMocks()
    await server?.cleanup()
    server = undefined
    if (victimDir !== undefined) rmSync(victimDir, { recursive: true, force: true })
    victimDir = undefined
  }, 15_000)

  /** A file outside the data folder that a planted symlink points at. */
  const plantVictim = (content: string) => {
    victimDir ??= freshDir()
    const victim = join(victimDir, `victim-${Math.random().toString(36).slice(2)}`)
    writeFileSync(victim, content)
    chmodSync(victim, 0o644)
    return victim
  }

  it("mcp.json created by the server, and the tool-records file, are 0600", async () => {
    server = await startTestServer()
    expect(modeOf(server.file)).toBe(0o600)
    const added = await server.post("/for_store/add_service?wait=15", { ...fixtureService("fx"), env: { TOKEN: "secret" } })
    expect(added.body.services[0].status, added.text).toBe("healthy")
    expect(modeOf(server.file)).toBe(0o600)
    expect((await server.post("/for_store/call_tool", { tool_name: "fx__echo", args: { text: "private" } })).body.success).toBe(true)
    expect(modeOf(join(server.dir, RECORDS_FILE))).toBe(0o600)
  })

  it("reset_mcp_json_file with a symlink planted at mcp.json.bak: a unique backup, 0600; the victim untouched", async () => {
    const dir = freshDir()
    const victim = plantVictim("do not overwrite\n")
    symlinkSync(victim, join(dir, "mcp.json.bak"))
    server = await startTestServer({ dir, services: { mcpServers: { a: { url: "http://127.0.0.1:9/mcp", headers: { Authorization: "Bearer secret" } } } } })
    const old = server.readFileText()
    const reply = await server.post("/for_store/reset_mcp_json_file")
    expect(reply.status, reply.text).toBe(200)
    const backup = reply.body.backup_path as string
    expect(backup).not.toBe(`${server.file}.bak`)
    expect(backup.startsWith(`${server.file}.`) && backup.endsWith(".bak")).toBe(true)
    expect(lstatSync(backup).isFile()).toBe(true)
    expect(readFileSync(backup, "utf8")).toBe(old)
    expect(modeOf(backup)).toBe(0o600)
    expect(readFileSync(victim, "utf8")).toBe("do not overwrite\n")
    expect(modeOf(victim)).toBe(0o644)
    expect(lstatSync(join(dir, "mcp.json.bak")).isSymbolicLink()).toBe(true)
    expect(server.readFile()).toEqual({ mcpServers: {} })

    // Again: one more unique name, the earlier backup kept.
    const again = await server.post("/for_store/reset_mcp_json_file")
    expect(again.status, again.text).toBe(200)
    expect(again.body.backup_path).not.toBe(backup)
    expect(readFileSync(backup, "utf8")).toBe(old)
    expect(existsSync(again.body.backup_path)).toBe(true)
    expect(readFileSync(victim, "utf8")).toBe("do not overwrite\n")
  })

  it("a symlink planted at the records path: refused with a logged error; calls still work and are listed; the victim untouched", async () => {
    const dir = freshDir()
    const content = `${JSON.stringify({ id: "x", timestamp: "2001-01-01T00:00:00.000Z", scope: "store", service_name: "old" })}\n`
    const victim = plantVictim(content)
    symlinkSync(victim, join(dir, RECORDS_FILE))
    const captured = captureLogs({ level: "error" })
    onTestFinished(() => captured.restore())
    const logged = captured.lines
    server = await startTestServer({ dir })
    expect(logged.some((m) => m.includes(RECORDS_FILE) && m.includes("symbolic link"))).toBe(true)
    const added = await server.post("/for_store/add_service?wait=15", fixtureService("fx"))
    expect(added.body.services[0].status, added.text).toBe("healthy")
    const call = await server.post("/for_store/call_tool", { tool_name: "fx__echo", args: { text: "kept in memory" } })
    expect(call.body.success, call.text).toBe(true)
    const records = await server.get("/for_store/tool_records")
    expect(records.body.total).toBe(1)
    expect(records.body.executions[0]).toMatchObject({ service_name: "fx", tool_name: "echo" })
    await server.close()
    expect(readFileSync(victim, "utf8")).toBe(content)
    expect(modeOf(victim)).toBe(0o644)
    expect(lstatSync(join(dir, RECORDS_FILE)).isSymbolicLink()).toBe(true)
  })
})
