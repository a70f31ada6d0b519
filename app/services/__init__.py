"""Services: one step of each process (scheduling, journal, listing, requests...),
shared by the processes and the simulator."""
