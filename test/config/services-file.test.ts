// The services configuration file: creation, refusal of broken files, the `_byagent_` and `agents`
// forms, serialized atomic updates, and watching for hand edits.
import { mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile, chmod, lstat, symlink } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest"
import { ServicesFile, ServicesFileError, type ServicesConfig } from "../../src/config/services-file.js"
import { agentScope, STORE_SCOPE } from "../../src/domain/service-definition.js"
import { quietFor } from "../support/index.js"

let dir: string
let file: string
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "mcp-store-services-"))
  file = join(dir, "mcp.json")
})
afterEach(async () => {
  await rm(dir, { recursive: true, force: true })
})

const json = async (path: string): Promise<unknown> => JSON.parse(await readFile(path, "utf8"))
const leftovers = async (folder: string) => (await readdir(folder)).filter((n) => n.endsWith(".tmp"))

describe("ServicesFile.open", () => {
  it("creates a missing file, and its folder", async () => {
    const nested = join(dir, "a", "b", "services.json")
    const services = await ServicesFile.open(nested)
    expect(services.path).toBe(nested)
    expect(await readFile(nested, "utf8")).toBe('{\n  "mcpServers": {}\n}\n')
    expect(services.read()).toEqual({ store: {}, agents: {} })
    expect(await leftovers(join(dir, "a", "b"))).toEqual([])
    // Private: it will hold env and header values; the folder made for it too.
    expect((await stat(nested)).mode & 0o777).toBe(0o600)
    expect((await stat(join(dir, "a", "b"))).mode & 0o777).toBe(0o700)
  })

  it("makes a relative path absolute", async () => {
    const services = await ServicesFile.open(file)
    expect(services.path.startsWith("/")).toBe(true)
  })

  it.each([
    ["not JSON", '{\n  "mcpServers": {\n    "a": {"url": "x"}\n    "b": {}\n  }\n}\n', /not valid JSON: .*line 4, column 5/],
    ["not JSON, with comments", '{\n  // services\n  "mcpServers": {\n    "a": {"url": "x"} "b": {}\n  }\n}\n', /not valid JSON: a comma is expected \(line 4, column 23\)/],
    ["empty", "", /not valid JSON/],
    ["an array", "[]", /top level must be a JSON object/],
    ["mcpServers an array", '{"mcpServers": []}', /"mcpServers" must be an object/],
    ["agents a string", '{"mcpServers": {}, "agents": "x"}', /"agents" must be an object/],
    ["an agent's mcpServers a list", '{"agents": {"a1": {"mcpServers": [1]}}}', /"agents.a1.mcpServers" must be an object/]
  ])("refuses a file that is %s, naming the path, and leaves it untouched", async (_what, content, detail) => {
    await writeFile(file, content)
    const before = await stat(file)
    const e = await ServicesFile.open(file).catch((err: unknown) => err)
    expect(e).toBeInstanceOf(ServicesFileError)
    expect((e as ServicesFileError).message.startsWith(`${file}: `)).toBe(true)
    expect((e as ServicesFileError).message).toMatch(detail)
    expect(await readFile(file, "utf8")).toBe(content)
    expect((await stat(file)).mtimeMs).toBe(before.mtimeMs)
    expect(await leftovers(dir)).toEqual([])
  })

  it("names where a file is not JSON, never the text around it (it may be a secret)", async () => {
    for (const content of ['{"mcpServers": {"a": {"url": "x", "headers": {"api_key": s3cr3tKEY}}}}', '{\n  // c\n  "api_key": s3cr3tKEY\n}']) {
      await writeFile(file, content)
      const e = await ServicesFile.open(file).catch((err: unknown) => err)
      expect(e).toBeInstanceOf(ServicesFileError)
      expect((e as ServicesFileError).message).toMatch(/not valid JSON: .*\(line \d+, column \d+\)$/)
      expect((e as ServicesFileError).message).not.toContain("s3cr3t")
      expect(String((e as Error).cause ?? "")).not.toContain("s3cr3t")
    }
  })

  it("reads store services, the agents section and _byagent_ keys, keeping unknown fields", async () => {
    const doc = {
      version: 3,
      mcpServers: {
        weather: { url: "http://127.0.0.1:8000/mcp", note: "kept" },
        "maps_byagent_agent-1": { url: "http://127.0.0.1:8001/mcp" },
        files: { command: "npx", args: ["-y", "server-filesystem", "/tmp"] }
      },
      agents: { "agent-2": { mcpServers: { search: { url: "http://127.0.0.1:8002/mcp" } }, label: "two" } }
    }
    await writeFile(file, JSON.stringify(doc))
    const services = await ServicesFile.open(file)
    expect(services.read()).toEqual({
      store: { weather: doc.mcpServers.weather, files: doc.mcpServers.files },
      agents: {
        "agent-1": { maps: { url: "http://127.0.0.1:8001/mcp" } },
        "agent-2": { search: { url: "http://127.0.0.1:8002/mcp" } }
      }
    })
    expect(services.raw()).toEqual(doc)
    expect(Object.isFrozen(services.read().store["weather"])).toBe(true)
  })

  it("accepts a byte order mark and a file without mcpServers", async () => {
    await writeFile(file, '\uFEFF{"agents": {"a": {"mcpServers": {"s": {"url": "http://x/mcp"}}}}}')
    const services = await ServicesFile.open(file)
    expect(services.read().agents["a"]).toEqual({ s: { url: "http://x/mcp" } })
  })
})

describe("ServicesFile.update", () => {
  it("writes changes before resolving, pretty-printed with a trailing newline", async () => {
    const services = await ServicesFile.open(file)
    const result = await services.update((d) => {
      d.setService(STORE_SCOPE, "weather", { url: "http://127.0.0.1:8000/mcp" })
      d.setService(agentScope("agent-1"), "maps", { command: "node", args: ["maps.js"] })
      return "done"
    })
    expect(result).toBe("done")
    const expected = {
      mcpServers: { weather: { url: "http://127.0.0.1:8000/mcp" } },
      agents: { "agent-1": { mcpServers: { maps: { command: "node", args: ["maps.js"] } } } }
    }
    expect(await readFile(file, "utf8")).toBe(`${JSON.stringify(expected, null, 2)}\n`)
    expect(services.read()).toEqual({
      store: { weather: { url: "http://127.0.0.1:8000/mcp" } },
      agents: { "agent-1": { maps: { command: "node", args: ["maps.js"] } } }
    })
    expect(await leftovers(dir)).toEqual([])
  })

  it("writes a _byagent_ service back to its key, a new agent service as a _byagent_ key too, and keeps unknown fields", async () => {
    await writeFile(
      file,
      JSON.stringify({
        owner: "python",
        mcpServers: { "maps_byagent_agent-1": { url: "http://a/mcp", extra: 1 }, weather: { url: "http://w/mcp" } }
      })
    )
    const services = await ServicesFile.open(file)
    await services.update((d) => {
      expect(d.getService(agentScope("agent-1"), "maps")).toEqual({ url: "http://a/mcp", extra: 1 })
      d.setService(agentScope("agent-1"), "maps", { url: "http://b/mcp", extra: 1, disabled: true })
      d.setService(agentScope("agent-1"), "fresh", { url: "http://c/mcp" })
    })
    expect(await json(file)).toEqual({
      owner: "python",
      mcpServers: {
        "maps_byagent_agent-1": { url: "http://b/mcp", extra: 1, disabled: true },
        weather: { url: "http://w/mcp" },
        // The file is the Python MCPStore's layout (no agents section): it stays so.
        "fresh_byagent_agent-1": { url: "http://c/mcp" }
      }
    })
    expect(services.read().agents["agent-1"]).toEqual({
      maps: { url: "http://b/mcp", extra: 1, disabled: true },
      fresh: { url: "http://c/mcp" }
    })
    expect(services.read().store).toEqual({ weather: { url: "http://w/mcp" } })

    await services.update((d) => {
      expect(d.removeService(agentScope("agent-1"), "maps")).toBe(true)
      expect(d.removeService(agentScope("agent-1"), "fresh")).toBe(true)
      expect(d.removeService(agentScope("agent-1"), "fresh")).toBe(false)
    })
    expect(await json(file)).toEqual({ owner: "python", mcpServers: { weather: { url: "http://w/mcp" } } })
    expect(services.read().agents).toEqual({})
  })

  it("removes agents, clears the store and replaces the document", async () => {
    await writeFile(
      file,
      JSON.stringify({
        mcpServers: { a: { url: "http://a/mcp" }, "x_byagent_ag": { url: "http://x/mcp" } },
        agents: { ag: { mcpServers: { y: { url: "http://y/mcp" } } }, other: { mcpServers: { z: { url: "http://z/mcp" } } } }
      })
    )
    const services = await ServicesFile.open(file)
    await services.update((d) => {
      expect(d.removeAgent("ag")).toBe(true)
      expect(d.removeAgent("ag")).toBe(false)
      expect(d.clearStore()).toBe(1)
      expect(d.view()).toEqual({ store: {}, agents: { other: { z: { url: "http://z/mcp" } } } })
    })
    expect(await json(file)).toEqual({ mcpServers: {}, agents: { other: { mcpServers: { z: { url: "http://z/mcp" } } } } })

    await services.update((d) => d.clearAll())
    expect(await json(file)).toEqual({ mcpServers: {} })

    await services.update((d) => d.replaceDocument({ mcpServers: { n: { url: "http://n/mcp" } }, note: 1 }))
    expect(services.raw()).toEqual({ mcpServers: { n: { url: "http://n/mcp" } }, note: 1 })
    await expect(services.update((d) => d.replaceDocument({ mcpServers: [] }))).rejects.toBeInstanceOf(ServicesFileError)
  })

  it("refuses bad names and agent ids, writing nothing", async () => {
    const services = await ServicesFile.open(file)
    const before = await readFile(file, "utf8")
    await expect(services.update((d) => d.setService(STORE_SCOPE, "bad name", { url: "http://x" }))).rejects.toThrow(
      /service name "bad name"/
    )
    await expect(
      services.update((d) => {
        d.setService(STORE_SCOPE, "ok", { url: "http://x" })
        d.setService(agentScope("a b"), "ok", { url: "http://x" })
      })
    ).rejects.toThrow(/agent id "a b"/)
    await expect(services.update((d) => d.setService(STORE_SCOPE, "x_byagent_y", { url: "http://x" }))).rejects.toThrow(
      RangeError
    )
    expect(await readFile(file, "utf8")).toBe(before)
    expect(services.read().store).toEqual({})
  })

  it("writes nothing for an update without change", async () => {
    await writeFile(file, '{"mcpServers":{"a":{"url":"http://a/mcp"}}}')
    const services = await ServicesFile.open(file)
    await services.update((d) => d.getService(STORE_SCOPE, "a"))
    await services.update((d) => d.setService(STORE_SCOPE, "a", { url: "http://a/mcp" }))
    expect(await readFile(file, "utf8")).toBe('{"mcpServers":{"a":{"url":"http://a/mcp"}}}')
  })

  it("lands all of 50 concurrent updates, in call order", async () => {
    const services = await ServicesFile.open(file)
    const order: number[] = []
    await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        services.update((d) => {
          order.push(i)
          d.setService(i % 2 === 0 ? STORE_SCOPE : agentScope(`agent-${i % 5}`), `s${i}`, { url: `http://h/${i}` })
        })
      )
    )
    expect(order).toEqual(Array.from({ length: 50 }, (_, i) => i))
    const reopened = (await ServicesFile.open(file)).read()
    expect(Object.keys(reopened.store)).toHaveLength(25)
    const agentCount = Object.values(reopened.agents).reduce((n, a) => n + Object.keys(a).length, 0)
    expect(agentCount).toBe(25)
    expect(reopened).toEqual(services.read())
    expect(await leftovers(dir)).toEqual([])
  })

  it("keeps going after a failed update", async () => {
    const services = await ServicesFile.open(file)
    const failed = services.update(() => {
      throw new Error("boom")
    })
    const next = services.update((d) => d.setService(STORE_SCOPE, "after", { url: "http://a/mcp" }))
    await expect(failed).rejects.toThrow("boom")
    await next
    expect(services.read().store["after"]).toEqual({ url: "http://a/mcp" })
  })

  it("refuses an asynchronous mutate function", async () => {
    const services = await ServicesFile.open(file)
    await expect(services.update(async () => undefined)).rejects.toThrow(/synchronous/)
  })

  it("leaves the old file and state when the write fails, and no temporary file", async () => {
    const services = await ServicesFile.open(file)
    await services.update((d) => d.setService(STORE_SCOPE, "a", { url: "http://a/mcp" }))
    const before = await readFile(file, "utf8")
    // Replace the file by a non-empty folder: the rename over it fails.
    await rm(file)
    await mkdir(join(file, "blocker"), { recursive: true })
    const e = await services.update((d) => d.setService(STORE_SCOPE, "b", { url: "http://b/mcp" })).catch((err: unknown) => err)
    expect(e).toBeInstanceOf(ServicesFileError)
    expect((e as ServicesFileError).message).toContain("cannot be written")
    expect(services.read().store).toEqual({ a: { url: "http://a/mcp" } })
    expect(await leftovers(dir)).toEqual([])
    await rm(file, { recursive: true })
    await writeFile(file, before)
    await services.update((d) => d.setService(STORE_SCOPE, "c", { url: "http://c/mcp" }))
    expect(Object.keys((await ServicesFile.open(file)).read().store)).toEqual(["a", "c"])
  })

  it("keeps the file's permissions", async () => {
    await writeFile(file, '{"mcpServers": {}}')
    await chmod(file, 0o600)
    const services = await ServicesFile.open(file)
    await services.update((d) => d.setService(STORE_SCOPE, "a", { url: "http://a/mcp", headers: { Authorization: "x" } }))
    expect((await stat(file)).mode & 0o777).toBe(0o600)
  })

  it("narrows a wider mode to 0600 (the file holds secrets), and a file removed by hand is written again 0600", async () => {
    await writeFile(file, '{"mcpServers": {}}')
    await chmod(file, 0o664)
    const services = await ServicesFile.open(file)
    await services.update((d) => d.setService(STORE_SCOPE, "a", { url: "http://a/mcp" }))
    expect((await stat(file)).mode & 0o777).toBe(0o600)
    await rm(file)
    await services.update((d) => d.setService(STORE_SCOPE, "b", { url: "http://b/mcp" }))
    expect((await stat(file)).mode & 0o777).toBe(0o600)
    expect(Object.keys((await ServicesFile.open(file)).read().store)).toEqual(["a", "b"])
    expect(await leftovers(dir)).toEqual([])
  })

  it("keeps a stricter mode (never loosens it)", async () => {
    await writeFile(file, '{"mcpServers": {}}')
    await chmod(file, 0o400)
    const services = await ServicesFile.open(file)
    await services.update((d) => d.setService(STORE_SCOPE, "a", { url: "http://a/mcp" }))
    expect((await stat(file)).mode & 0o777).toBe(0o400)
    expect(Object.keys((await ServicesFile.open(file)).read().store)).toEqual(["a"])
  })

  it("many updates in a row: each written before it resolves, none lost, read() follows", async () => {
    const services = await ServicesFile.open(file)
    const names = Array.from({ length: 40 }, (_, i) => `s${i}`)
    await Promise.all(
      names.map((name) =>
        services.update((d) => d.setService(agentScope(`agent-${name.length}`), name, { url: `http://${name}/mcp` })).then(async () => {
          const onDisk = (await json(file)) as { agents: Record<string, { mcpServers: Record<string, unknown> }> }
          const written = Object.values(onDisk.agents).flatMap((a) => Object.keys(a.mcpServers))
          expect(written).toContain(name)
        })
      )
    )
    const all = Object.values(services.read().agents).flatMap((a) => Object.keys(a))
    expect(all.sort()).toEqual([...names].sort())
    expect(Object.values((await ServicesFile.open(file)).read().agents).flatMap((a) => Object.keys(a)).sort()).toEqual([...names].sort())
    expect(await leftovers(dir)).toEqual([])
  })
})

describe("ServicesFile.update on a file someone else changed", () => {
  it("makes its change on the file as it is on disk: the other change is kept", async () => {
    const services = await ServicesFile.open(file)
    // Another process (mcp-store import, a person) writes the file; this process does not watch it.
    await writeFile(file, JSON.stringify({ mcpServers: { imported: { url: "http://i/mcp" } }, note: "theirs" }))
    await services.update((d) => d.setService(STORE_SCOPE, "mine", { url: "http://m/mcp" }))
    expect(await json(file)).toEqual({ mcpServers: { imported: { url: "http://i/mcp" }, mine: { url: "http://m/mcp" } }, note: "theirs" })
    expect(Object.keys(services.read().store)).toEqual(["imported", "mine"])
  })

  it("tells the watchers of the other change once, with this change in it", async () => {
    const services = await ServicesFile.open(file)
    const seen: ServicesConfig[] = []
    const stop = services.watch((next) => seen.push(next))
    try {
      await writeFile(file, JSON.stringify({ mcpServers: { imported: { url: "http://i/mcp" } } }))
      // Before the watcher's debounce has run: the update finds the other change itself.
      await services.update((d) => d.setService(STORE_SCOPE, "mine", { url: "http://m/mcp" }))
      expect(seen).toHaveLength(1)
      expect(Object.keys(seen[0]!.store)).toEqual(["imported", "mine"])
      await quietFor(400) // debounce is 100 ms: a second report would have come by now
      expect(seen).toHaveLength(1)
    } finally {
      stop()
    }
  })

  it("keeps a half-done hand edit in a backup before replacing it", async () => {
    const services = await ServicesFile.open(file)
    const broken = '{"mcpServers": {"half": {"url": '
    await writeFile(file, broken)
    await services.update((d) => d.setService(STORE_SCOPE, "mine", { url: "http://m/mcp" }))
    expect(await json(file)).toEqual({ mcpServers: { mine: { url: "http://m/mcp" } } })
    expect(await readFile(`${file}.bak`, "utf8")).toBe(broken)
    expect((await stat(`${file}.bak`)).mode & 0o777).toBe(0o600)
  })
})

describe("ServicesFile.watch", () => {
  const fsEvents = () => process.getActiveResourcesInfo().filter((r) => r === "FSEventWrap").length

  it("reports hand edits, also by rename, but not this process's own writes", async () => {
    const services = await ServicesFile.open(file)
    const seen: ServicesConfig[] = []
    const errors: ServicesFileError[] = []
    const stop = services.watch(
      (next) => seen.push(next),
      (e) => errors.push(e)
    )
    try {
      await services.update((d) => d.setService(STORE_SCOPE, "own", { url: "http://own/mcp" }))
      await quietFor(400) // debounce is 100 ms: a report would have come by now
      expect(seen).toEqual([])

      await writeFile(file, JSON.stringify({ mcpServers: { own: { url: "http://own/mcp" }, hand: { url: "http://hand/mcp" } } }))
      await vi.waitFor(() => expect(seen).toHaveLength(1), { timeout: 3000 })
      expect(seen[0]?.store["hand"]).toEqual({ url: "http://hand/mcp" })
      expect(services.read()).toEqual(seen[0])

      // An editor that writes a new file and renames it over the old one.
      const tmp = join(dir, "mcp.json.swp")
      await writeFile(tmp, JSON.stringify({ mcpServers: { renamed: { url: "http://r/mcp" } } }))
      await rename(tmp, file)
      await vi.waitFor(() => expect(seen).toHaveLength(2), { timeout: 3000 })
      expect(seen[1]?.store).toEqual({ renamed: { url: "http://r/mcp" } })

      // The next update builds on the picked-up edit.
      await services.update((d) => d.setService(STORE_SCOPE, "later", { url: "http://l/mcp" }))
      expect(Object.keys(((await json(file)) as { mcpServers: object }).mcpServers)).toEqual(["renamed", "later"])
      await quietFor(400) // debounce is 100 ms: a report would have come by now
      expect(seen).toHaveLength(2)
      expect(errors).toEqual([])
    } finally {
      stop()
    }
  })

  it("skips invalid content while the user is mid-edit, and formatting-only edits", async () => {
    await writeFile(file, '{"mcpServers": {"a": {"url": "http://a/mcp"}}}')
    const services = await ServicesFile.open(file)
    const seen: ServicesConfig[] = []
    const errors: ServicesFileError[] = []
    const stop = services.watch(
      (next) => seen.push(next),
      (e) => errors.push(e)
    )
    try {
      await writeFile(file, '{"mcpServers": {"a": {"url": "http://a/mcp"},')
      await vi.waitFor(() => expect(errors).toHaveLength(1), { timeout: 3000 })
      expect(errors[0]?.message).toContain("not valid JSON")
      expect(services.read().store).toEqual({ a: { url: "http://a/mcp" } })

      await writeFile(file, '{\n    "mcpServers": {\n        "a": {"url": "http://a/mcp"}\n    }\n}\n')
      await quietFor(400) // debounce is 100 ms: a report would have come by now
      expect(seen).toEqual([])

      await writeFile(file, '{"mcpServers": {"a": {"url": "http://a2/mcp"}}}')
      await vi.waitFor(() => expect(seen).toHaveLength(1), { timeout: 3000 })
      expect(seen[0]?.store["a"]).toEqual({ url: "http://a2/mcp" })
    } finally {
      stop()
    }
  })

  it("stops reporting and releases the watcher on unsubscribe", async () => {
    const services = await ServicesFile.open(file)
    const before = fsEvents()
    const seen: ServicesConfig[] = []
    const stopA = services.watch((n) => seen.push(n))
    const seenB: ServicesConfig[] = []
    const stopB = services.watch((n) => seenB.push(n))
    expect(fsEvents()).toBe(before + 1)

    await writeFile(file, JSON.stringify({ mcpServers: { x: { url: "http://x/mcp" } } }))
    await vi.waitFor(() => expect(seen.length + seenB.length).toBe(2), { timeout: 3000 })

    stopA()
    stopA()
    expect(fsEvents()).toBe(before + 1)
    stopB()
    // The watcher's handle is released when it has closed, a turn of the event loop later.
    await vi.waitFor(() => expect(fsEvents()).toBe(before), { timeout: 1_000 })

    await writeFile(file, JSON.stringify({ mcpServers: { y: { url: "http://y/mcp" } } }))
    await quietFor(400) // debounce is 100 ms: a report would have come by now
    expect(seen).toHaveLength(1)
    expect(seenB).toHaveLength(1)
  })
})

describe("ServicesFile.backup", () => {
  it("writes <file>.bak with the file as it is on disk, mode 0600", async () => {
    await writeFile(file, '{"mcpServers": {"a": {"url": "http://a/mcp", "headers": {"Authorization": "secret"}}}}')
    await chmod(file, 0o644)
    const services = await ServicesFile.open(file)
    const backup = await services.backup()
    expect(backup).toBe(`${file}.bak`)
    expect(await readFile(backup, "utf8")).toBe(await readFile(file, "utf8"))
    expect((await stat(backup)).mode & 0o777).toBe(0o600)
  })

  it("never overwrites: a taken name gives a unique one, <file>.<time>.bak then numbered", async () => {
    await writeFile(file, '{"mcpServers": {}}')
    await writeFile(`${file}.bak`, "an older backup")
    const services = await ServicesFile.open(file)
    const names = [await services.backup(), await services.backup(), await services.backup()]
    expect(new Set(names).size).toBe(3)
    expect(names[0]).toMatch(/mcp\.json\.\d{8}T\d{6}Z\.bak$/)
    expect(names[1]).toMatch(/mcp\.json\.\d{8}T\d{6}Z(\.1)?\.bak$/)
    expect(await readFile(`${file}.bak`, "utf8")).toBe("an older backup")
    for (const name of names) expect(await readFile(name, "utf8")).toBe('{"mcpServers": {}}')
  })

  it("never writes through a symlink planted at <file>.bak: the victim is left byte-for-byte as it was", async () => {
    const victim = join(dir, "victim.txt")
    await writeFile(victim, "precious\n")
    await chmod(victim, 0o644)
    await symlink(victim, `${file}.bak`)
    await writeFile(file, '{"mcpServers": {"a": {"command": "x", "env": {"TOKEN": "secret"}}}}')
    const services = await ServicesFile.open(file)
    const backup = await services.backup()
    expect(backup).not.toBe(`${file}.bak`)
    expect(await readFile(victim, "utf8")).toBe("precious\n")
    expect((await stat(victim)).mode & 0o777).toBe(0o644)
    expect((await lstat(`${file}.bak`)).isSymbolicLink()).toBe(true)
    expect(await readFile(backup, "utf8")).toContain("secret")
    expect((await lstat(backup)).isFile()).toBe(true)
    expect((await stat(backup)).mode & 0o777).toBe(0o600)
  })
})
