; Inno Setup script of RL Swarm Desktop for Windows 10/11 (x64). Built by installers/windows/build.sh:
;   ISCC /DAppVersion=0.1.0 installers\windows\rl-swarm.iss  ->  dist\rl-swarm-desktop-<version>-windows-x64-setup.exe
; It installs the GUI (PyInstaller bundle) for the current user (no administrator rights needed) with a Start menu
; entry, plus the Linux bundle in {app}\wsl: hivemind's p2p daemon has no Windows build, so the app runs its node
; inside WSL2 and unpacks that tarball there on first start (node/platform_support.py).
#ifndef AppVersion
  #error Pass the version: ISCC /DAppVersion=x.y.z rl-swarm.iss
#endif

[Setup]
AppId={{6F1C2B9E-3D4A-4E8B-9C27-5A1E0F7D2B61}
AppName=RL Swarm
AppVersion={#AppVersion}
AppPublisher=RL Swarm Desktop
DefaultDirName={autopf}\RL Swarm
DefaultGroupName=RL Swarm
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
MinVersion=10.0.19041
OutputDir=..\..\dist
OutputBaseFilename=rl-swarm-desktop-{#AppVersion}-windows-x64-setup
SetupIconFile=..\..\resources\icons\app.ico
UninstallDisplayIcon={app}\rl-swarm.exe
Compression=lzma2
SolidCompression=yes
WizardStyle=modern

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "..\..\build\installers\dist\rl-swarm\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs
Source: "..\..\dist\rl-swarm-desktop-linux-x86_64.tar.gz"; DestDir: "{app}\wsl"; Flags: ignoreversion

[Icons]
Name: "{autoprograms}\RL Swarm"; Filename: "{app}\rl-swarm.exe"
Name: "{autodesktop}\RL Swarm"; Filename: "{app}\rl-swarm.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\rl-swarm.exe"; Description: "{cm:LaunchProgram,RL Swarm}"; Flags: nowait postinstall skipifsilent

[Code]
// Say before installing what the app will need, so WSL2 is no surprise at first start (the app says it again).
function InitializeSetup(): Boolean;
begin
  Result := True;
  if not FileExists(ExpandConstant('{sys}\wsl.exe')) then
    MsgBox('RL Swarm trains inside WSL2 (Windows Subsystem for Linux), which is not installed yet.' #13#10#13#10 +
      'After this setup: open PowerShell as administrator, run' #13#10 + '    wsl --install' #13#10 +
      'restart Windows, and start RL Swarm. It installs its node into WSL by itself.', mbInformation, MB_OK);
end;
