/**
 * Whether a process of this machine is running (the owner of a lock or of a
 * file being written). Pids are reused, rarely: a dead owner's pid taken by
 * another process only delays what waits for it.
 */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
