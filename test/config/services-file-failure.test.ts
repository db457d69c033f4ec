// Failed writes of the services file, simulated by a stubbed node:fs/promises (the tests run as
// root, so permissions cannot make a write fail): the old file and state stay, no temp file remains.
//
// The forks run one file after another with a shared module cache (vitest.config.ts, `isolate:
// false`): a module of src/ loaded by an earlier file would hold the real node:fs/promises, and one
// loaded here holds the stub. So the modules under test are loaded afresh after the stub is in
// place (beforeAll), and the module cache is reset once this file is done (afterAll).
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest"
import type * as ServicesFileModule from "../../src/config/services-file.js"

const failures = vi.hoisted(() => ({ rename: undefined as Error | undefined, write: undefined as Error | undefined }))

vi.mock("node:fs/promises", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs/promises")>()
  return {
    ...actual,
    rename: async (from: string, to: string) => {
      if (failures.rename !== undefined) throw failures.rename
      return actual.rename(from, to)
    },
    open: async (...args: Parameters<typeof actual.open>) => {
      const handle = await actual.open(...args)
      if (failures.write === undefined || args[1] !== "wx") return handle
      const error = failures.write
      return new Proxy(handle, {
        get(target, key, receiver) {
          if (key === "writeFile") return async () => Promise.reject(error)
          const value: unknown = Reflect.get(target, key, receiver)
          return typeof value === "function" ? value.bind(target) : value
        }
      })
    }
  }
})

let ServicesFile: typeof ServicesFileModule.ServicesFile
let ServicesFileError: typeof ServicesFileModule.ServicesFileError
let STORE_SCOPE: typeof import("../../src/domain/service-definition.js").STORE_SCOPE
beforeAll(async () => {
  vi.resetModules()
  ;({ ServicesFile, ServicesFileError } = await import("../../src/config/services-file.js"))
  ;({ STORE_SCOPE } = await import("../../src/domain/service-definition.js"))
})
afterAll(() => {
  failures.rename = undefined
  failures.write = undefined
  vi.doUnmock("node:fs/promises")
  vi.resetModules()
})

let dir: string
let file: string
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "mcp-store-services-fail-"))
  file = join(dir, "mcp.json")
  failures.rename = undefined
  failures.write = undefined
})
afterEach(async () => {
  await rm(dir, { recursive: true, force: true })
})

const temporaryFiles = async () => (await readdir(dir)).filter((n) => n.endsWith(".tmp"))

describe("a failed write", () => {
  it.each([
    ["the rename", "rename"],
    ["writing the temporary file", "write"]
  ] as const)("in %s leaves the old file and state, and no temporary file", async (_what, stage) => {
    const services = await ServicesFile.open(file)
    await services.update((d) => d.setService(STORE_SCOPE, "a", { url: "http://a/mcp" }))
    const bytes = await readFile(file, "utf8")
    const state = services.read()

    failures[stage] = Object.assign(new Error("ENOSPC: no space left on device"), { code: "ENOSPC" })
    const e = await services.update((d) => d.setService(STORE_SCOPE, "b", { url: "http://b/mcp" })).catch((err: unknown) => err)
    expect(e).toBeInstanceOf(ServicesFileError)
    expect((e as ServicesFileModule.ServicesFileError).message).toBe(`${file}: cannot be written (ENOSPC: no space left on device)`)
    expect(await readFile(file, "utf8")).toBe(bytes)
    expect(services.read()).toBe(state)
    expect(await temporaryFiles()).toEqual([])

    failures[stage] = undefined
    await services.update((d) => d.setService(STORE_SCOPE, "c", { url: "http://c/mcp" }))
    expect(Object.keys(services.read().store)).toEqual(["a", "c"])
    expect(await readFile(file, "utf8")).toContain('"c"')
  })

  it("when creating a missing file rejects with the path", async () => {
    failures.rename = new Error("EIO: i/o error")
    const e = await ServicesFile.open(file).catch((err: unknown) => err)
    expect(e).toBeInstanceOf(ServicesFileError)
    expect((e as ServicesFileModule.ServicesFileError).message).toBe(`${file}: cannot be created (EIO: i/o error)`)
    expect(await readdir(dir)).toEqual([])
  })
})
