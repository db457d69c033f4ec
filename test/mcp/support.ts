/**
 * Helpers shared by the MCP tests: definitions for the fixtures, process checks that see through
 * zombies, and the reference server started over HTTP on a free loopback port.
 */
import { spawn } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import { expect } from "vitest"
import type { ResolvedDefinition } from "../../src/domain/service.js"
import { McpRequestError } from "../../src/mcp/types.js"
import { everythingHttp, LISTENING_LINE, type Launch } from "../fixtures/paths.js"

/** Generous request options for calls that are expected to succeed. */
export const T = { timeoutMs: 10_000 } as const

/** The text parts of a tool result, joined. */
export const textOf = (result: { content: ReadonlyArray<{ type: string; text?: string }> }): string =>
  result.content.map((c) => (c.type === "text" ? (c.text ?? "") : "")).join("")

/** The rejection of a promise that must reject with McpRequestError. */
export const failureOf = async (promise: Promise<unknown>): Promise<McpRequestError> => {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e
  )
  expect(error).toBeInstanceOf(McpRequestError)
  return error as McpRequestError
}

/** A local (stdio) definition for a launch command. */
export const localDef = (launch: Launch, cwd?: string): ResolvedDefinition => ({
  kind: "local",
  transport: "stdio",
  command: launch.command,
  args: launch.args,
  env: launch.env ?? {},
  cwd
})

/** A remote definition. */
export const remoteDef = (
  url: string,
  transport: "streamable_http" | "sse" = "streamable_http",
  headers: Record<string, string> = {}
): ResolvedDefinition => ({ kind: "remote", transport, url, headers })

/** The state letter and process group of a process from /proc, or undefined when there is none. */
export const procStat = (pid: number): { state: string; pgrp: number } | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    // "pid (comm) S ppid pgrp ...": comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return { state: fields[0] ?? "", pgrp: Number(fields[2]) }
  } catch {
    return undefined
  }
}

/**
 * Whether a process is gone: `kill(pid, 0)` fails with ESRCH, or it is a zombie (dead, waiting to be
 * reaped; on machines whose init does not reap orphans, killed grandchildren stay zombies).
 */
export const isGone = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ESRCH"
  }
  return procStat(pid)?.state === "Z"
}

/** Live (non-zombie) processes whose process group is `pgid`, from /proc. */
export const liveGroupMembers = (pgid: number): Array<number> =>
  readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number)
    .filter((pid) => {
      const stat = procStat(pid)
      return stat !== undefined && stat.pgrp === pgid && stat.state !== "Z"
    })

/** The reference server over HTTP on 127.0.0.1 and a free port. */
export interface EverythingHttp {
  readonly url: string
  stop(): Promise<void>
}

/** Starts the reference server in `streamableHttp` (endpoint /mcp) or `sse` (endpoint /sse) mode. */
export const startEverythingHttp = async (mode: "streamableHttp" | "sse"): Promise<EverythingHttp> => {
  const launch = everythingHttp(mode)
  const child = spawn(launch.command, [...launch.args], {
    env: { ...process.env, ...launch.env },
    stdio: ["ignore", "ignore", "pipe"]
  })
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  let stderr = ""
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server-everything did not start: ${stderr}`)), 10_000)
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString()
      const match = LISTENING_LINE.exec(stderr)
      if (match?.[1] !== undefined) {
        clearTimeout(timer)
        resolve(Number(match[1]))
      }
    })
    child.once("exit", (code) => {
      clearTimeout(timer)
      reject(new Error(`server-everything exited with ${code}: ${stderr}`))
    })
  })
  return {
    url: `http://127.0.0.1:${port}/${mode === "sse" ? "sse" : "mcp"}`,
    stop: async () => {
      child.kill("SIGKILL")
      await exited
    }
  }
}
