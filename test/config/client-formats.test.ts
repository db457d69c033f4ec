// The config files users already have (Claude Desktop, Cursor, Cline, Windsurf, Gemini CLI, VS Code
// with comments, the Python MCPStore) load as the services file: each one's stdio fixture answers a
// tool call and its remote fixture connects. Changes are written back in the file's own layout
// (serverUrl, httpUrl, VS Code's servers and type, _byagent_ keys, comments). Invalid entries are
// named with their reason in the log and in list_services, and the valid ones run; one name rule
// holds over HTTP and from a file.
import { readFileSync, writeFileSync } from "node:fs"
import { readFile, rm, writeFile } from "node:fs/promises"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { ServicesFile } from "../../src/config/services-file.js"
import { agentScope, STORE_SCOPE } from "../../src/domain/service-definition.js"
import { captureLogs, type CapturedLogs } from "../../src/logging/log.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { stdioFixture } from "../fixtures/paths.js"
import { freshDir, startTestServer, waitStatus, type TestServer } from "../support/index.js"

const TEMPLATES = join(import.meta.dirname, "client-configs")

/** A template of client-configs/ with the fixtures' command and URL filled in (the rest of the text as it is). */
const fill = (template: string, httpUrl: string): string => {
  const launch = stdioFixture()
  return readFileSync(join(TEMPLATES, template), "utf8")
    .replaceAll('"__NODE__"', JSON.stringify(launch.command))
    .replaceAll('"__FIXTURE_ARGS__"', launch.args.map((a) => JSON.stringify(a)).join(", "))
    .replaceAll('"__HTTP_URL__"', JSON.stringify(httpUrl))
}

let http: HttpFixture
beforeAll(async () => {
  http = await startHttpFixture()
})
afterAll(async () => {
  await http?.stop()
})

let server: TestServer | undefined
let logs: CapturedLogs | undefined
afterEach(async () => {
  await server?.cleanup()
  server = undefined
  logs?.restore()
  logs = undefined
})

/** A server on a services file holding `text` (written byte for byte). */
const startOn = async (text: string): Promise<TestServer> => {
  const dir = freshDir()
  writeFileSync(join(dir, "mcp.json"), text)
  return startTestServer({ dir })
}

/** Starts a server on a services file holding `text`, stopped after the test. */
const serve = async (text: string): Promise<TestServer> => {
  server = await startOn(text)
  return server
}

/**
 * The server on a template's file, started once for the file's tests: the load test of a template
 * only reads (its services, a call of each), and runs first, so the write-back tests after it find
 * the file as the template wrote it (each of them checks the file against what it read itself).
 */
const byTemplate = new Map<string, Promise<TestServer>>()
const serveTemplate = (template: string): Promise<TestServer> => {
  let started = byTemplate.get(template)
  if (started === undefined) {
    started = startOn(fill(template, http.url))
    byTemplate.set(template, started)
  }
  return started
}
afterAll(async () => {
  for (const started of byTemplate.values()) await (await started.catch(() => undefined))?.cleanup()
  byTemplate.clear()
})

describe("config files of other clients load as they are", { timeout: 30_000 }, () => {
  it.each([
    ["Claude Desktop", "claude-desktop.json", undefined],
    ["Cursor", "cursor.json", "store"],
    ["Cline", "cline.json", "store"],
    ["Windsurf (serverUrl)", "windsurf.json", "store"],
    ["Gemini CLI (httpUrl)", "gemini-settings.json", "store"],
    ["VS Code (servers, type, inputs, comments)", "vscode-mcp.jsonc", "store"],
    ["the Python MCPStore (_byagent_ keys)", "python-mcpstore.json", "agent1"]
  ] as const)("%s", async (_client, template, remoteScope) => {
    const s = await serveTemplate(template)
    await waitStatus(s, "/for_store", "fixture", "healthy")
    const call = await s.post("/for_store/call_tool", { tool_name: "fixture__echo", args: { text: `hello from ${template}` } })
    expect(call.status).toBe(200)
    expect(call.body).toMatchObject({ success: true, result: `hello from ${template}` })
    if (remoteScope !== undefined) {
      const prefix = remoteScope === "store" ? "/for_store" : `/for_agent/${remoteScope}`
      await waitStatus(s, prefix, "remote", "healthy")
      const listed = await s.get(`${prefix}/list_services`)
      expect(listed.body.services.find((x: { name: string }) => x.name === "remote")).toMatchObject({ transport_type: "streamable_http", last_error: null })
      const remote = await s.post(`${prefix}/call_tool`, { tool_name: "remote__add", args: { a: 2, b: 3 } })
      expect(remote.body).toMatchObject({ success: true, result: "5" })
    }
  })
})

describe("changes are written back in the file's own layout", { timeout: 30_000 }, () => {
  it("Windsurf's serverUrl and Gemini CLI's httpUrl stay, with the fields mcp-store does not know", async () => {
    for (const template of ["windsurf.json", "gemini-settings.json"]) {
      const s = await serveTemplate(template)
      await waitStatus(s, "/for_store", "remote", "healthy")
      const before = s.readFile() as { mcpServers: Record<string, Record<string, unknown>> }
      const off = await s.post("/for_store/disconnect_service", { service_name: "remote" })
      expect(off.status).toBe(200)
      const after = s.readFile() as { mcpServers: Record<string, Record<string, unknown>> }
      // The same entry, one field more; the other client can still read it.
      expect(after).toEqual({ ...before, mcpServers: { ...before.mcpServers, remote: { ...before.mcpServers["remote"], disabled: true } } })
    }
  })

  it("a service added to an agent of a Python MCPStore file becomes a _byagent_ key", async () => {
    const s = await serveTemplate("python-mcpstore.json")
    await waitStatus(s, "/for_store", "fixture", "healthy")
    const added = await s.post("/for_agent/agent2/add_service", { name: "weather", url: http.url })
    expect(added.status).toBe(200)
    const file = s.readFile() as Record<string, Record<string, unknown>>
    expect(file["agents"]).toBeUndefined()
    expect(Object.keys(file["mcpServers"]!)).toEqual(["fixture", "remote_byagent_agent1", "weather_byagent_agent2"])
    expect(file["mcpServers"]!["weather_byagent_agent2"]).toEqual({ url: http.url })
    const removed = await s.del("/for_agent/agent1/delete_service/remote")
    expect(removed.status).toBe(200)
    expect(Object.keys((s.readFile() as Record<string, Record<string, unknown>>)["mcpServers"]!)).toEqual(["fixture", "weather_byagent_agent2"])
  })

  it("a VS Code file keeps its comments, inputs and layout; a new service goes to servers, with its type", async () => {
    const text = fill("vscode-mcp.jsonc", http.url)
    const s = await serveTemplate("vscode-mcp.jsonc")
    await waitStatus(s, "/for_store", "remote", "healthy")
    const added = await s.post("/for_store/add_service", { name: "extra", url: http.url, transport: "sse" })
    expect(added.status).toBe(200)
    const written = s.readFileText()
    for (const comment of ["// .vscode/mcp.json: the servers of this workspace", "// A local server over stdio", "/* A remote server over Streamable HTTP */"]) {
      expect(written).toContain(comment)
    }
    const doc = (await ServicesFile.open(s.file)).raw() as Record<string, Record<string, unknown>>
    expect(doc["mcpServers"]).toBeUndefined()
    expect(doc["inputs"]).toHaveLength(1)
    expect(doc["servers"]!["extra"]).toEqual({ type: "sse", url: http.url })
    // The entries not changed are byte for byte as they were; the new one went first in its section.
    expect(written).toContain(text.slice(text.indexOf("// A local server"), text.indexOf("\n  },\n}")))
    expect(written.indexOf('"extra"')).toBeLessThan(written.indexOf('"fixture"'))
  })
})

describe("ServicesFile: spellings and layouts", () => {
  let dir: string
  beforeAll(() => {
    dir = freshDir()
  })
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  it("reads serverUrl and httpUrl as url (httpUrl is Streamable HTTP) and writes each back under its own key", async () => {
    const file = join(dir, "spellings.json")
    await writeFile(file, JSON.stringify({ mcpServers: { w: { serverUrl: "http://w/sse" }, g: { httpUrl: "http://g/mcp", trust: true } } }))
    const services = await ServicesFile.open(file)
    expect(services.read().store).toEqual({ w: { url: "http://w/sse" }, g: { url: "http://g/mcp", trust: true, transport: "streamable_http" } })
    await services.update((d) => {
      d.setService(STORE_SCOPE, "w", { ...d.getService(STORE_SCOPE, "w")!, url: "http://w2/sse" })
      d.setService(STORE_SCOPE, "g", { ...d.getService(STORE_SCOPE, "g")!, disabled: true })
    })
    expect(JSON.parse(await readFile(file, "utf8"))).toEqual({
      mcpServers: { w: { serverUrl: "http://w2/sse" }, g: { httpUrl: "http://g/mcp", trust: true, disabled: true } }
    })
  })

  it("names what it loads but does not expand: VS Code's ${input:...} variables", async () => {
    const file = join(dir, "vscode-notes.json")
    await writeFile(
      file,
      JSON.stringify({
        inputs: [{ type: "promptString", id: "key", password: true }],
        servers: {
          api: { type: "http", url: "http://127.0.0.1:9/mcp", headers: { Authorization: "Bearer ${input:key}" } },
          local: { type: "stdio", command: "node", args: ["s.js"], envFile: "${workspaceFolder}/.env" }
        }
      })
    )
    const services = await ServicesFile.open(file)
    expect(Object.keys(services.read().store)).toEqual(["api", "local"])
    expect(services.problems().map((p) => [p.at, p.outcome, p.problem])).toEqual([
      ['servers."api"', "note", expect.stringContaining("holds ${input:key}: mcp-store expands only ${VAR}")]
      // ${workspaceFolder} has the form of ${VAR}: it is expanded from the environment when the service connects.
    ])
  })

  it("a file with comments keeps them on every write; a plain file is written plain", async () => {
    const file = join(dir, "comments.json")
    const text = '{\n  // my services\n  "mcpServers": {\n    "a": { "url": "http://a/mcp" }, // the first\n  },\n}\n'
    await writeFile(file, text)
    const services = await ServicesFile.open(file)
    await services.update((d) => d.setService(STORE_SCOPE, "b", { url: "http://b/mcp" }))
    await services.update((d) => d.setService(agentScope("a1"), "c", { command: "node" }))
    const written = await readFile(file, "utf8")
    expect(written).toContain("// my services")
    expect(written).toContain('"a": { "url": "http://a/mcp" }, // the first')
    expect(written.indexOf('"b"')).toBeLessThan(written.indexOf('"a"'))
    expect((await ServicesFile.open(file)).read()).toEqual({
      store: { a: { url: "http://a/mcp" }, b: { url: "http://b/mcp" } },
      agents: { a1: { c: { command: "node" } } }
    })
  })
})

describe("invalid entries of the file", { timeout: 30_000 }, () => {
  const launch = stdioFixture()
  const doc = {
    mcpServers: {
      good: { command: launch.command, args: launch.args },
      "bad-args": { command: launch.command, args: 5 },
      "bad-scheme": { url: "ftp://files.example.com/mcp" },
      "Brave Search": { command: launch.command, args: launch.args },
      "not-an-object": "http://127.0.0.1:1/mcp"
    },
    agents: { "agent 1": { mcpServers: { x: { url: "http://127.0.0.1:1/mcp" } } } }
  }

  it("start: the valid ones run, each invalid one is named with its reason in the log and in list_services", async () => {
    logs = captureLogs({ level: "info" })
    const s = await serve(`${JSON.stringify(doc, null, 2)}\n`)
    await waitStatus(s, "/for_store", "good", "healthy")
    expect((await s.post("/for_store/call_tool", { tool_name: "good__echo", args: { text: "ok" } })).body.result).toBe("ok")
    const listed = (await s.get("/for_store/list_services")).body.services as Array<{ name: string; last_error: string | null }>
    expect(listed.map((x) => x.name).sort()).toEqual(["bad-args", "bad-scheme", "good"])
    expect(listed.find((x) => x.name === "bad-args")?.last_error).toMatch(/args/)
    expect(listed.find((x) => x.name === "bad-scheme")?.last_error).toMatch(/http/)
    const lines = logs.lines.join("\n")
    expect(lines).toMatch(/mcpServers\."bad-args": "args" .*\(loaded as unreachable\)/)
    expect(lines).toMatch(/mcpServers\."bad-scheme": unsupported URL scheme ftp: use http or https \(loaded as unreachable\)/)
    expect(lines).toMatch(/mcpServers\."Brave Search": service name "Brave Search" .*rename it, e\.g\. "Brave-Search" \(not loaded\)/)
    expect(lines).toMatch(/mcpServers\."not-an-object": must be an object \(a service definition\) \(not loaded\)/)
    expect(lines).toMatch(/agents\."agent 1"\.mcpServers\."x": agent id "agent 1" .*\(not loaded\)/)
    // The file is left as it was.
    expect(s.readFile()).toEqual(doc)
  })

  it("one name rule: a name with a space is refused over HTTP as it is left out of the file", async () => {
    // Any store: the rule does not depend on the file (Claude Desktop's, already running, gets the services).
    const s = await serveTemplate("claude-desktop.json")
    for (const name of ["Brave Search", "a__b", "x_byagent_y"]) {
      const reply = await s.post("/for_store/add_service", { name, url: http.url })
      expect(reply.status, name).toBe(400)
    }
    const ok = await s.post("/for_store/add_service", { name: "Brave-Search.v2_x", url: http.url })
    expect(ok.status).toBe(200)
  })
})
