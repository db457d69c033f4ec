// The temporary files a killed process left beside a file the store replaces (src/config/atomic-write.ts):
// removed before this process first replaces that file, whichever file it is, when the process that
// made them no longer runs. A process's own, and a running one's, are left.
import { spawnSync } from "node:child_process"
import { lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { writeAtomically } from "../../src/config/atomic-write.js"

const dirs: string[] = []
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true })
})

/** The pid of a process that has ended. */
const endedPid = (): number => spawnSync(process.execPath, ["-e", ""]).pid as number

describe("writeAtomically", () => {
  it("first removes the temporary files a killed process left beside the file it replaces", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mcp-store-atomic-"))
    dirs.push(dir)
    const file = join(dir, "mcp.async-calls.json")
    const dead = `.mcp.async-calls.json.${endedPid()}.0123456789ab.tmp`
    const alive = `.mcp.async-calls.json.${process.ppid}.0123456789ab.tmp`
    const other = `.mcp.json.${endedPid()}.0123456789ab.tmp`
    for (const name of [dead, alive, other]) writeFileSync(join(dir, name), "a copy, secrets and all")
    await writeAtomically(file, "{}\n")
    const left = readdirSync(dir)
    expect(left).not.toContain(dead)
    // A running process's temporary file, and another file's, are not this write's to remove.
    expect(left).toContain(alive)
    expect(left).toContain(other)
    expect(left).toContain("mcp.async-calls.json")
  })

  it("replaces a symlink in the file's place with a file of its own: the target untouched, nothing taken from it", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mcp-store-atomic-"))
    dirs.push(dir)
    const target = join(dir, "elsewhere.json")
    writeFileSync(target, "theirs\n", { mode: 0o400 })
    const file = join(dir, "mcp.json.credentials")
    symlinkSync(target, file)
    await writeAtomically(file, "ours\n")
    expect(lstatSync(file).isSymbolicLink()).toBe(false)
    expect(readFileSync(file, "utf8")).toBe("ours\n")
    expect(lstatSync(file).mode & 0o777).toBe(0o600)
    expect(readFileSync(target, "utf8")).toBe("theirs\n")
  })
})
