// The package as a user gets it: `npm pack`, the tarball installed into an empty
// folder with `npm install --offline --omit=dev` (every production dependency is in the cache that
// `npm ci` filled; nothing is downloaded), then used as its README says: `npx mcp-store --version`,
// `npx mcp-store run api` serving /health with the demo service of mcp.example.json, and
// `import("mcp-store")` from plain Node creating a store, with types for TypeScript. The tarball
// holds only what runs. dist/ is the one `npm ci` built (`prepare`); it is rebuilt first when a
// source is newer. The clone itself runs its build too: `npx mcp-store` there runs dist/mcp-store.mjs,
// which the build leaves executable. Every process runs in its own group and is ended; every folder
// is removed.
import { execFile, spawn, type ChildProcess } from "node:child_process"
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { REPO_ROOT } from "../fixtures/paths.js"
import { api, cleanEnv, ensureBuilt, killGroup, packAndInstall, processGone, within } from "../support/index.js"

const run = promisify(execFile)
const require = createRequire(import.meta.url)
const pkg = JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as {
  version: string
  bin: Record<string, string>
  exports: Record<string, string | Record<string, string>>
  files: ReadonlyArray<string>
}

const folders: string[] = []
const children: ChildProcess[] = []
let app = ""
let files: ReadonlyArray<string> = []

beforeAll(async () => {
  await ensureBuilt()
  const work = mkdtempSync(join(tmpdir(), "mcp-store-package-"))
  folders.push(work)
  // Without the dependencies' install scripts: they only deal with native add-ons the store never loads (InstallOptions).
  ;({ app, files } = await packAndInstall(work, { ignoreScripts: true }))
}, 300_000)

afterAll(async () => {
  for (const child of children) {
    if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) killGroup(child.pid)
  }
  await Promise.all(children.map((c) => (c.exitCode === null && c.signalCode === null ? new Promise((r) => c.once("exit", r)) : undefined)))
  for (const dir of folders) rmSync(dir, { recursive: true, force: true }) // 11,000 files: seconds on a busy disk
}, 120_000)

describe("the npm package", () => {
  it("ships only what runs: the built program, the library with its types, the demo's example file", () => {
    for (const path of files) {
      expect(path, path).toMatch(/^(dist\/.+\.(js|mjs|d\.ts|html)|dist\/http\/examples\.json|mcp\.example\.json|package\.json|README\.md|LICENSE)$/)
    }
    expect(files).toContain("LICENSE")
    expect(files).toContain("dist/index.d.ts")
    expect(files).toContain("dist/demo-server.mjs")
    expect(files.some((f) => f.startsWith("src/") || f.startsWith("test/") || f.startsWith("bench/") || f.startsWith(".ci/"))).toBe(false)
    expect(files).not.toContain("mcp.json")
    // Every path the manifest names is in the tarball.
    expect(files).toContain(pkg.bin["mcp-store"])
    const root = pkg.exports["."] as Record<string, string>
    for (const target of [root["types"], root["default"], pkg.exports["./demo-server"]]) expect(files).toContain(String(target).slice(2))
  })

  it("installs without development tools: no tsx, esbuild, typescript or vitest in a production install", () => {
    const installed = readdirSync(join(app, "node_modules"))
    for (const dev of ["tsx", "esbuild", "typescript", "vitest", "mcp-hub"]) expect(installed, dev).not.toContain(dev)
    expect(existsSync(join(app, "node_modules", "mcp-store", "dist", "mcp-store.mjs"))).toBe(true)
  })

  it("`mcp-store --version` answers the version: the installed command and through npx (their times: bench/install.ts)", async () => {
    // The installed command itself (what a shell runs from node_modules/.bin or a global install), then through npx.
    for (const [command, args] of [
      [join(app, "node_modules", ".bin", "mcp-store"), ["--version"]],
      ["npx", ["--offline", "mcp-store", "--version"]]
    ] as const) {
      const { stdout } = await run(command, [...args], { cwd: app, env: cleanEnv(), timeout: 60_000 })
      expect(stdout.trim(), command).toBe(pkg.version)
    }
  })

  it("`npx mcp-store run api --port 0` serves /health and runs the demo service of mcp.example.json", async () => {
    const config = join(app, "mcp.json")
    copyFileSync(join(app, "node_modules", "mcp-store", "mcp.example.json"), config)
    const child = spawn("npx", ["--offline", "mcp-store", "run", "api", "--port", "0", "--config", config], {
      cwd: app,
      env: cleanEnv(),
      detached: true, // its own process group: npx, the store and the demo server are ended together
      stdio: ["ignore", "pipe", "pipe"]
    })
    children.push(child)
    let output = ""
    const listening = new Promise<string>((resolve, reject) => {
      const onData = (chunk: Buffer) => {
        output += chunk.toString("utf8")
        const match = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output)
        if (match) resolve(match[1]!)
      }
      child.stdout!.on("data", onData)
      child.stderr!.on("data", onData)
      child.once("exit", (code) => reject(new Error(`the store exited (${code}) before listening: ${output}`)))
    })
    const base = await within(listening, 30_000, "the store listening")
    const store = api(base)
    const health = await store.get("/health")
    expect(health.status).toBe(200)
    expect(health.body).toMatchObject({ status: "healthy", version: pkg.version })
    const ready = await store.post("/for_store/wait_service", { client_id_or_service_name: "demo", status: "healthy", timeout: 20 })
    expect(ready.body.data?.result, ready.text).toBe(true)
    const call = await store.post("/for_store/call_tool", { tool_name: "demo__add", args: { a: 2, b: 3 } })
    expect(call.body, call.text).toMatchObject({ success: true, result: { sum: 5 } })
    // The records live beside the services file, named after it.
    expect(existsSync(join(app, "mcp.records.jsonl"))).toBe(true)
    const exited = new Promise((resolve) => child.once("exit", resolve))
    process.kill(-child.pid!, "SIGTERM")
    await within(exited, 20_000, "the store's exit")
    expect(processGone(child.pid!)).toBe(true)
  })

  it("`import(\"mcp-store\")` from plain Node creates a store, and TypeScript finds its types", async () => {
    const script = [
      'const { createStore } = await import("mcp-store")',
      'const store = await createStore({ mcpConfigFile: "./library.json" })',
      "const services = await store.forStore().listServices()",
      "await store.stop()",
      "console.log(JSON.stringify({ created: typeof store, services }))"
    ].join("\n")
    const imported = run(process.execPath, ["--input-type=module", "--eval", script], { cwd: app, env: cleanEnv(), timeout: 60_000 })

    // Meanwhile (both are processes of their own), a consumer type-checks against the shipped
    // declarations (no implicit any from a missing .d.ts).
    writeFileSync(
      join(app, "consumer.ts"),
      'import { createStore, type Store } from "mcp-store"\nexport const open = (file: string): Promise<Store> => createStore({ mcpConfigFile: file })\n'
    )
    writeFileSync(
      join(app, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, noEmit: true, skipLibCheck: true, types: [] },
        files: ["consumer.ts"]
      })
    )
    const tsc = require.resolve("typescript/bin/tsc")
    const checked = run(process.execPath, [tsc, "-p", app], { cwd: app, timeout: 120_000 }).then(
      () => "",
      (e: { stdout?: string }) => e.stdout ?? String(e)
    )

    const { stdout } = await imported
    expect(JSON.parse(stdout.trim())).toMatchObject({ created: "object" })
    expect(JSON.parse(readFileSync(join(app, "library.json"), "utf8"))).toEqual({ mcpServers: {} })
    expect(await checked).toBe("")
  }, 180_000)
})

describe("the built clone", () => {
  // The file itself is run (its run bit and its `#!/usr/bin/env node` line), not through npx: npm 11's
  // npx runs a project's own bin by first installing the project into its cache (a minute on a loaded
  // machine, and a half-made cache entry when cut short). The installed package's npx is tested above.
  it("keeps the program's run bit: ./dist/mcp-store.mjs in the clone runs as a program", async () => {
    const entry = join(REPO_ROOT, pkg.bin["mcp-store"]!)
    expect((statSync(entry).mode & 0o777).toString(8)).toBe("755")
    const { stdout } = await run(entry, ["--version"], { cwd: REPO_ROOT, env: cleanEnv(), timeout: 30_000 })
    expect(stdout.trim()).toBe(pkg.version)
  }, 60_000)
})
