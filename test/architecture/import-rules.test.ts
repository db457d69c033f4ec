// The import rules of .dependency-cruiser.cjs, which `npm test` runs over src/: the real tree keeps
// them, and a tree that breaks them (a cycle, an arrow up the layers, an unknown folder, an import of
// @effect/platform's index, the Redis client loaded at start, a face importing a room of the
// operations instead of taking its service) is refused.
import { execFile } from "node:child_process"
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"

const ROOT = resolve(import.meta.dirname, "../..")
const DEPCRUISE = join(ROOT, "node_modules/dependency-cruiser/bin/dependency-cruise.mjs")
const CONFIG = join(ROOT, ".dependency-cruiser.cjs")

/** Runs the rules over `src` of `cwd`: the exit code and the report. */
const cruise = (cwd: string) =>
  new Promise<{ code: number; output: string }>((done) => {
    execFile(process.execPath, [DEPCRUISE, "src", "--config", CONFIG, "--output-type", "err"], { cwd, timeout: 120_000 }, (error, stdout, stderr) =>
      done({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, output: `${stdout}${stderr}` })
    )
  })

/** A small tree of TypeScript files (path -> source) with a tsconfig, in a temporary folder. */
const tree = (files: Record<string, string>): string => {
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-rules-"))
  dirs.push(dir)
  writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", strict: true } }))
  // The project's dependencies, for the rules about them.
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"))
  for (const [path, source] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true })
    writeFileSync(join(dir, path), source)
  }
  return dir
}
const dirs: string[] = []
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
})

describe("import rules", { timeout: 120_000 }, () => {
  // The real tree, and one tree that breaks each rule in its own files, cruised at once (a cruise
  // is a process that loads TypeScript: about 2 s of CPU).
  let real: Promise<{ code: number; output: string }>
  let broken: Promise<{ code: number; output: string }>
  beforeAll(() => {
    real = cruise(ROOT)
    broken = cruise(
      tree({
        // An arrow up the layers: the domain importing the HTTP layer.
        "src/domain/name.ts": 'import { route } from "../http/route.js"\nexport const name = route + "x"\n',
        "src/http/route.ts": 'export const route = "/"\n',
        // A cycle inside one folder.
        "src/runtime/a.ts": 'import { b } from "./b.js"\nexport const a = () => b()\n',
        "src/runtime/b.ts": 'import { a } from "./a.js"\nexport const b = (): unknown => a\n',
        // A folder with no place in the layers.
        "src/misc/helper.ts": 'import { value } from "../domain/value.js"\nexport const helper = value\n',
        "src/domain/value.ts": 'export const value = "x"\n',
        // @effect/platform's index, and the Redis client loaded at start.
        "src/http/index-user.ts": 'import { HttpRouter } from "@effect/platform"\nexport const router = HttpRouter\n',
        "src/http/node-index-user.ts": 'import { NodeHttpServer } from "@effect/platform-node"\nexport const server = NodeHttpServer\n',
        "src/redis/eager.ts": 'import { createClient } from "redis"\nexport const make = createClient\n',
        "src/redis/lazy.ts": 'import type { RedisClientType } from "redis"\nexport const make = async (): Promise<RedisClientType | undefined> => (await import("redis")) && undefined\n',
        // A face calling a room of the operations directly, and one that only names its types.
        "src/runtime/calls.ts": 'export interface CallExit { readonly ok: boolean }\nexport const runCall = (): CallExit => ({ ok: true })\n',
        "src/runtime/queries.ts": 'export const listServices = (): ReadonlyArray<string> => []\n',
        "src/http/direct-face.ts": 'import { runCall } from "../runtime/calls.js"\nimport * as queries from "../runtime/queries.js"\nexport const face = () => [runCall(), queries.listServices()]\n',
        "src/http/typed-face.ts": 'import type { CallExit } from "../runtime/calls.js"\nexport const ok = (exit: CallExit): boolean => exit.ok\n'
      })
    )
  })

  it("the source tree keeps them", async () => {
    const { code, output } = await real
    expect(output).toContain("no dependency violations found")
    expect(code).toBe(0)
  })

  it("refuses an arrow up the layers: the domain importing the HTTP layer", async () => {
    const { code, output } = await broken
    expect(code).not.toBe(0)
    expect(output).toContain("no-arrow-up-from-domain: src/domain/name.ts → src/http/route.ts")
  })

  it("refuses a cycle, even inside one folder", async () => {
    const { output } = await broken
    expect(output).toMatch(/no-circular: src\/runtime\/(a|b)\.ts → /)
  })

  it("refuses an import of @effect/platform's or @effect/platform-node's index, and the Redis client loaded at start (not by import(), not for its types)", async () => {
    const { output } = await broken
    expect(output).toMatch(/no-effect-platform-index: src\/http\/index-user\.ts → node_modules\/@effect\/platform\/dist\/(esm|cjs)\/index\.js/)
    expect(output).toMatch(/no-effect-platform-node-index: src\/http\/node-index-user\.ts → node_modules\/@effect\/platform-node\/dist\/(esm|cjs)\/index\.js/)
    expect(output).toMatch(/redis-client-on-demand: src\/redis\/eager\.ts → node_modules\/redis\//)
    expect(output).not.toContain("src/redis/lazy.ts")
  })

  it("refuses a face (src/http) importing a room of the operations (calls, catalog, commands, queries), not for its types", async () => {
    const { output } = await broken
    expect(output).toContain("faces-through-operations: src/http/direct-face.ts → src/runtime/calls.ts")
    expect(output).toContain("faces-through-operations: src/http/direct-face.ts → src/runtime/queries.ts")
    expect(output).not.toContain("src/http/typed-face.ts")
  })

  it("refuses a folder that has no place in the layers", async () => {
    const { output } = await broken
    expect(output).toContain("no-unknown-folder: src/misc/helper.ts")
  })
})
